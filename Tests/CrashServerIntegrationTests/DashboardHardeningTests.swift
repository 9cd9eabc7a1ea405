import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's hardening rules for the dashboard (hardening.md, "Dashboard"): escaping per
/// Unicode scalar, sessions that end on the server, and the cookies' attributes.
@Suite struct DashboardHardeningTests {
    /// A quote followed by a combining acute accent: one Swift `Character` that is not `"`,
    /// while a browser ends the attribute at the quote.
    static let payload = "x\"\u{301} data-pwned=\"1"
    /// The payload as the pages must show it: every quote an entity, the accent kept.
    static let escaped = "x&quot;\u{301} data-pwned=&quot;1"

    @Test func everySpecialCharacterIsEscapedWhateverFollowsIt() {
        let entities = ["&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"]
        for (special, entity) in entities {
            for mark in ["\u{301}", "\u{20DD}", "\u{FE0F}", "\u{200D}", ""] {
                if !mark.isEmpty { #expect((special + mark).count == 1, "one Character with its mark") }
                #expect(HTMLEscaping.escape("a" + special + mark + "b") == "a" + entity + mark + "b")
            }
        }
        #expect(HTMLEscaping.escape(Self.payload) == Self.escaped)
        #expect(HTMLEscaping.escape("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d&quot;e&#39;f")
        #expect(HTMLEscaping.escape("plain ünïcödé 🚀") == "plain ünïcödé 🚀")
    }

    /// Every template, partials included, renders `{{ }}` through the per-scalar escaper:
    /// the page title goes through the header partial.
    @Test func templatesAndPartialsEscapePerScalar() throws {
        let pages = try DashboardPages()
        let html = try pages.render(ErrorView(pageTitle: Self.payload, heading: Self.payload, message: Self.payload), "error")
        #expect(!html.contains("data-pwned=\""), "\(html)")
        #expect(html.contains("<title>\(Self.escaped) · CrashGuard</title>"), "\(html)")
        #expect(html.components(separatedBy: Self.escaped).count == 4, "title, heading and message")
    }

    /// The probe of the security review: a report whose model, version, OS, reason and context
    /// carry the payload adds no attribute to any element of the list page (also with the
    /// payload in its filters) or of the crash page, and shows the exact escaped text.
    @Test func aCombiningMarkAfterAQuoteAddsNoAttribute() async throws {
        let p = try await makeProject()
        let report = queryReport(
            "boom " + Self.payload, at: Date().addingTimeInterval(-600), version: Self.payload, os: Self.payload,
            model: Self.payload, stack: ["frame " + Self.payload], context: [Self.payload: Self.payload])
        try await withApp { client in
            let (session, listHTML) = try await client.crashList(after: [report], in: p)
            #expect(Self.attributeNames(listHTML).isDisjoint(with: ["data-pwned"]))
            // The version, in the row's title attribute and its text.
            #expect(listHTML.contains("title=\"\(Self.escaped)\""), "versions attribute")
            let id = try #require(listHTML.firstMatch(of: /data-group="(\d+)"/)?.1)

            let query = DashboardQuery.encode(Self.payload)
            let filtered = try await client.page("/projects/\(p.project)/crashes?window=24h&os=\(query)&version=\(query)", session)
            #expect(filtered.status == .ok)
            let filteredHTML = String(buffer: filtered.body)
            #expect(Self.attributeNames(filteredHTML).isDisjoint(with: ["data-pwned"]))
            #expect(filteredHTML.contains("name=\"os\" value=\"\(Self.escaped)\""))
            #expect(filteredHTML.matches(of: /class="crash-row"/).count == 1, "the filter matched the report")

            let crash = try await client.page("/projects/\(p.project)/crashes/\(id)?window=24h", session)
            #expect(crash.status == .ok)
            let html = String(buffer: crash.body)
            #expect(Self.attributeNames(html).isDisjoint(with: ["data-pwned"]))
            #expect(html.contains("<pre class=\"reason\">boom \(Self.escaped)</pre>"))
            #expect(html.contains("<span class=\"v\" title=\"\(Self.escaped)\">\(Self.escaped)</span>"), "breakdown entry")
            #expect(html.contains("<dt>\(Self.escaped)</dt><dd>\(Self.escaped)</dd>"), "context")
            #expect(html.contains("frame \(Self.escaped)"), "stack")
            #expect(!html.contains("data-pwned=\"") && !listHTML.contains("data-pwned=\""))
        }
    }

    // MARK: - Sessions

    /// Sign-out ends the session on the server: a copy of the old cookie opens no page and
    /// posts no form, while another session of the same project stays signed in.
    @Test func signOutEndsTheSessionOnTheServer() async throws {
        let p = try await makeProject()
        let report = queryReport("sign-out probe", at: Date().addingTimeInterval(-300))
        try await withApp { client in
            try await client.send([report], key: p.ingestKey)
            let session = try await client.signIn(token: p.readToken, expecting: p.project)
            let other = try await client.signIn(token: p.readToken, expecting: p.project)
            let list = try await client.page("/projects/\(p.project)/crashes", session)
            let id = try #require(String(buffer: list.body).firstMatch(of: /data-group="(\d+)"/)?.1)
            let crash = "/projects/\(p.project)/crashes/\(id)"
            let csrf = try #require(try await client.page(crash, session).csrf())

            let out = try await client.postForm("/signout", ["csrf": csrf], cookies: [session.pair])
            #expect(out.status == .seeOther)
            #expect(out.setCookie(DashboardSessions.loopback.cookieName)?.flags.contains("Max-Age=0") == true)

            // The copied cookie, sent again as if the browser had kept it.
            for path in ["/projects/\(p.project)", "/projects/\(p.project)/crashes", crash] {
                let page = try await client.page(path, session)
                #expect(page.status == .seeOther, "\(path)")
                #expect(page.headers[.location] == "/", "\(path)")
            }
            let home = try await client.page("/", session)
            #expect(home.status == .ok && String(buffer: home.body).contains("name=\"token\""), "the sign-in form")
            let triage = try await client.postForm(crash, ["action": "ignore", "csrf": csrf], cookies: [session.pair])
            #expect(triage.status == .seeOther && triage.headers[.location] == "/")
            let group = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(group.json["status"] as? String == "open", "the old cookie changed nothing")

            #expect(try await client.page(crash, other).status == .ok, "another session is not ended")
        }
    }

    /// Sessions live in the database: two servers with different session secrets on one
    /// database (replicas) both honour a session either started, and a sign-out on one ends
    /// it on the other.
    @Test func sessionsHoldAcrossReplicas() async throws {
        let p = try await makeProject()
        let one = try await buildApplication(configuration: TestEnvironment.configuration(), logger: TestEnvironment.logger)
        let two = try await buildApplication(configuration: TestEnvironment.configuration(), logger: TestEnvironment.logger)
        try await one.test(.router) { first in
            try await two.test(.router) { second in
                let session = try await first.signIn(token: p.readToken, expecting: p.project)
                #expect(try await second.page("/projects/\(p.project)", session).status == .ok)
                let csrf = try #require(try await first.page("/projects/\(p.project)", session).csrf())
                #expect(try await first.postForm("/signout", ["csrf": csrf], cookies: [session.pair]).status == .seeOther)
                let after = try await second.page("/projects/\(p.project)", session)
                #expect(after.status == .seeOther && after.headers[.location] == "/")
            }
        }
    }

    /// `project rotate --read-token` ends every dashboard session of the project (and only of
    /// it); `--ingest-key` ends none.
    @Test func rotatingTheReadTokenEndsTheProjectsSessions() async throws {
        let p = try await makeProject(), q = try await makeProject()
        try await withApp { client in
            let first = try await client.signIn(token: p.readToken, expecting: p.project)
            let second = try await client.signIn(token: p.readToken, expecting: p.project)
            let elsewhere = try await client.signIn(token: q.readToken, expecting: q.project)
            _ = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotateKeys(slug: p.project, .ingestKey) }
            #expect(try await client.page("/projects/\(p.project)", first).status == .ok, "a new ingest key keeps the sessions")
            let rotated = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotateKeys(slug: p.project, .readToken) }
            for session in [first, second] {
                let page = try await client.page("/projects/\(p.project)", session)
                #expect(page.status == .seeOther && page.headers[.location] == "/")
            }
            #expect(try await client.page("/projects/\(q.project)", elsewhere).status == .ok, "another project's session stays")
            let fresh = try await client.signIn(token: try #require(rotated.readToken), expecting: p.project)
            #expect(try await client.page("/projects/\(p.project)", fresh).status == .ok)
        }
        let left = try await withTestDatabase { db in
            let rows = try await db.client.query(
                "SELECT count(*)::int FROM dashboard_sessions s JOIN projects p ON p.id = s.project_id WHERE p.slug = \(p.project)",
                logger: TestEnvironment.logger)
            var count = -1
            for try await n in rows.decode(Int.self) { count = n }
            return count
        }
        #expect(left == 1, "the rotation deleted the old sessions' rows; only the fresh one is left")
    }

    // MARK: - Cookies

    /// Plain cookies only when the public URL is http on a loopback host; everywhere else
    /// `Secure` with the `__Host-` prefix. Always `HttpOnly`, `SameSite=Strict`, `Path=/`,
    /// never a `Domain`.
    @Test(arguments: [
        ("http://127.0.0.1:8080", false), ("http://localhost:8080", false), ("http://[::1]:8080/", false),
        ("http://127.0.0.2", false), ("https://crashes.example.com", true), ("https://127.0.0.1:8443", true),
        ("http://crashes.example.com", true), ("http://10.0.0.5:8080", true), ("http://127.0.0.1.example.com", true),
        ("http://0.0.0.0:8080", true), ("http://192.168.1.10", true),
    ])
    func cookieAttributesFollowThePublicURL(publicURL: String, secure: Bool) async throws {
        #expect(DashboardSessions.securesCookies(publicURL: publicURL) == secure)
        let p = try await makeProject()
        let names: DashboardSessions = secure ? .secured : .loopback
        try await withApp(TestEnvironment.configuration { $0.publicURL = publicURL }) { client in
            let form = try await client.execute(uri: "/", method: .get)
            let pre = try #require(form.setCookie(names.signInCookieName))
            let session = try await client.signIn(token: p.readToken, expecting: p.project, sessions: names)
            for cookie in [pre, session] {
                #expect(cookie.name.hasPrefix("__Host-") == secure, "\(cookie.name)")
                for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] { #expect(cookie.flags.contains(flag), "\(cookie.flags)") }
                #expect(cookie.flags.contains("Secure") == secure, "\(cookie.flags)")
                #expect(!cookie.flags.contains { $0.lowercased().hasPrefix("domain=") })
            }
            #expect(try await client.page("/projects/\(p.project)", session).status == .ok)
            // A cookie under the other name is not the session.
            let other = SetCookie(name: secure ? "cg_session" : "__Host-cg_session", value: session.value, flags: [])
            #expect(try await client.page("/projects/\(p.project)", other).status == .seeOther)
        }
    }

    // MARK: - Helpers

    /// The names of every attribute of every start tag in `html`, read as a browser's
    /// tokenizer does: a name runs to whitespace, `/`, `>` or `=`; a value is quoted with `"`
    /// or `'` (to the same quote) or runs to whitespace or `>`.
    static func attributeNames(_ html: String) -> Set<String> {
        let s = Array(html.unicodeScalars)
        var names = Set<String>()
        var i = 0
        func isSpace(_ c: Unicode.Scalar) -> Bool { c == " " || c == "\n" || c == "\t" || c == "\r" || c == "\u{0C}" }
        while i < s.count {
            guard s[i] == "<", i + 1 < s.count, s[i + 1].properties.isAlphabetic else {
                i += 1
                continue
            }
            i += 1
            while i < s.count, !isSpace(s[i]), s[i] != ">", s[i] != "/" { i += 1 }  // tag name
            while i < s.count, s[i] != ">" {
                if isSpace(s[i]) || s[i] == "/" {
                    i += 1
                    continue
                }
                var name = ""
                repeat {
                    name.unicodeScalars.append(s[i])
                    i += 1
                } while i < s.count && !isSpace(s[i]) && s[i] != "/" && s[i] != ">" && s[i] != "="
                names.insert(name.lowercased())
                while i < s.count, isSpace(s[i]) { i += 1 }
                guard i < s.count, s[i] == "=" else { continue }
                i += 1
                while i < s.count, isSpace(s[i]) { i += 1 }
                guard i < s.count else { break }
                if s[i] == "\"" || s[i] == "'" {
                    let quote = s[i]
                    i += 1
                    while i < s.count, s[i] != quote { i += 1 }
                    i += 1
                } else {
                    while i < s.count, !isSpace(s[i]), s[i] != ">" { i += 1 }
                }
            }
            i += 1
        }
        return names
    }

    @Test func theAttributeReaderSeesAnInjectedAttribute() {
        #expect(Self.attributeNames("<td title=\"x\"\u{301} data-pwned=\"1\">t</td>").contains("data-pwned"))
        #expect(!Self.attributeNames("<td title=\"\(Self.escaped)\">\(Self.payload)</td>").contains("data-pwned"))
        #expect(Self.attributeNames("<a href='/x' id=y disabled>") == ["href", "id", "disabled"])
    }
}
