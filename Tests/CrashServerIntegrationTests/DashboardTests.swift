import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Mustache
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The web dashboard through Hummingbird's test client, on the real database: headers,
/// sessions, CSRF, escaping of attacker-controlled text, triage.
@Suite struct DashboardTests {
    static let csp =
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    @Test func signInPageHasStrictHeadersAndAPreSessionCookie() async throws {
        try await withApp { client in
            let page = try await client.execute(uri: "/", method: .get)
            #expect(page.status == .ok)
            #expect(page.headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
            #expect(page.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
            #expect(page.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            #expect(page.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
            #expect(page.headers[.cacheControl] == "no-store")
            let cookie = try #require(page.setCookie(DashboardSessions.loopback.signInCookieName))
            #expect(cookie.flags.contains("HttpOnly"))
            #expect(cookie.flags.contains("SameSite=Strict"))
            #expect(cookie.flags.contains("Path=/"))
            #expect(!cookie.flags.contains("Secure"))
            let html = String(buffer: page.body)
            #expect(html.contains("name=\"token\""))
            #expect(try page.csrf() != nil)
            #expect(!html.contains("<script"))

            let css = try await client.execute(uri: "/dashboard.css", method: .get)
            #expect(css.status == .ok)
            #expect(css.headers[.contentType] == "text/css; charset=utf-8")
            #expect(String(buffer: css.body).contains(".topbar"))
        }
    }

    @Test func signInSetsASignedSessionNotTheToken() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let session = try await client.signIn(token: p.readToken, expecting: p.project)
            #expect(!session.value.contains(p.readToken))
            #expect(session.flags.contains("HttpOnly") && session.flags.contains("SameSite=Strict") && session.flags.contains("Path=/"))
            let overview = try await client.page("/projects/\(p.project)", session)
            #expect(overview.status == .ok)
            #expect(overview.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
            #expect(String(buffer: overview.body).contains("id=\"project-name\">\(p.project)<"))
            // Signed in, `/` goes to the project.
            let home = try await client.page("/", session)
            #expect(home.status == .seeOther)
            #expect(home.headers[.location] == "/projects/\(p.project)")
        }
    }

    @Test func signInRefusesWithoutCSRFOrWithAWrongToken() async throws {
        let p = try await makeProject()
        try await withApp { client in
            // No pre-session cookie and no CSRF token: 403, no session.
            let bare = try await client.postForm("/signin", ["token": p.readToken], cookies: [])
            #expect(bare.status == .forbidden)
            #expect(bare.setCookie(DashboardSessions.loopback.cookieName) == nil)
            // A CSRF token that belongs to another pre-session: 403.
            let first = try await client.execute(uri: "/", method: .get)
            let second = try await client.execute(uri: "/", method: .get)
            let mixed = try await client.postForm(
                "/signin", ["token": p.readToken, "csrf": try #require(try first.csrf())],
                cookies: [try #require(second.setCookie(DashboardSessions.loopback.signInCookieName)).pair])
            #expect(mixed.status == .forbidden)
            // A valid form with an unknown token: 401 and the page says so.
            let wrong = try await client.postForm(
                "/signin", ["token": "cgr_nope", "csrf": try #require(try first.csrf())],
                cookies: [try #require(first.setCookie(DashboardSessions.loopback.signInCookieName)).pair])
            #expect(wrong.status == .unauthorized)
            #expect(String(buffer: wrong.body).contains("does not belong to any project"))
            #expect(wrong.setCookie(DashboardSessions.loopback.cookieName) == nil)
        }
    }

    @Test func pagesNeedAValidSessionForTheirProject() async throws {
        let a = try await makeProject(), b = try await makeProject()
        try await withApp { client in
            let none = try await client.page("/projects/\(a.project)/crashes", nil)
            #expect(none.status == .seeOther)
            #expect(none.headers[.location] == "/")
            let session = try await client.signIn(token: a.readToken, expecting: a.project)
            // A cookie that names no stored session (another id of the right shape, a changed
            // character, the read token itself) is no session.
            var forged = session
            forged.value = DashboardSessions.randomID()
            #expect(try await client.page("/projects/\(a.project)", forged).status == .seeOther)
            forged.value = String(session.value.dropLast()) + (session.value.hasSuffix("A") ? "B" : "A")
            #expect(try await client.page("/projects/\(a.project)", forged).status == .seeOther)
            forged.value = a.readToken
            #expect(try await client.page("/projects/\(a.project)", forged).status == .seeOther)
            // Another project's pages: 404, as in the API.
            let other = try await client.page("/projects/\(b.project)/crashes", session)
            #expect(other.status == .notFound)
            #expect(other.headers[HTTPField.Name("Content-Security-Policy")!] == Self.csp)
        }
    }

    @Test func rotatingTheKeysEndsTheSessions() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let session = try await client.signIn(token: p.readToken, expecting: p.project)
            #expect(try await client.page("/projects/\(p.project)", session).status == .ok)
            _ = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotate(slug: p.project) }
            let after = try await client.page("/projects/\(p.project)", session)
            #expect(after.status == .seeOther)
            #expect(after.headers[.location] == "/")
        }
    }

    @Test func hostileReportTextRendersAsText() async throws {
        let p = try await makeProject()
        let now = Date()
        let hostile = "<script>alert(1)</script>"
        let report = queryReport(
            hostile, at: now.addingTimeInterval(-600), version: "1.0\"><b>", os: "<i>os</i>", model: "<svg onload=alert(2)>",
            stack: ["<img src=x onerror=alert(3)>", "frame & 'quote'"], context: ["<k>": "\"><script>alert(4)</script>"])
        try await withApp { client in
            let (session, listHTML) = try await client.crashList(after: [report], in: p)
            // The group title is the normalized reason (digits become <n>).
            #expect(listHTML.contains("&lt;script&gt;alert(&lt;n&gt;)&lt;/script&gt;"))
            #expect(listHTML.contains("1.0&quot;&gt;&lt;b&gt;"))
            #expect(!listHTML.contains("<script"))
            #expect(!listHTML.contains("<b>"))
            let id = try #require(listHTML.firstMatch(of: /data-group="(\d+)"/)?.1)
            let detail = try await client.page("/projects/\(p.project)/crashes/\(id)", session)
            #expect(detail.status == .ok)
            let html = String(buffer: detail.body)
            #expect(html.contains("id=\"crash-title\">&lt;script&gt;alert(&lt;n&gt;)&lt;/script&gt;<"))
            #expect(html.contains("<pre class=\"reason\">&lt;script&gt;alert(1)&lt;/script&gt;</pre>"))
            #expect(html.contains("&lt;img src=x onerror=alert(3)&gt;"))
            #expect(html.contains("frame &amp; &#39;quote&#39;"))
            #expect(html.contains("&lt;k&gt;"))
            #expect(html.contains("&quot;&gt;&lt;script&gt;alert(4)&lt;/script&gt;"))
            #expect(html.contains("&lt;svg onload=alert(2)&gt;"))
            for tag in ["<script", "<img", "<i>", "<b>", "<k>", "<svg onload"] { #expect(!html.contains(tag), "\(tag) unescaped") }
        }
    }

    @Test func triageThroughTheFormsChecksCSRF() async throws {
        let p = try await makeProject()
        let report = queryReport("triage me", at: Date().addingTimeInterval(-300), version: "2.0.0")
        try await withApp { client in
            try await client.send([report], key: p.ingestKey)
            let session = try await client.signIn(token: p.readToken, expecting: p.project)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let path = "/projects/\(p.project)/crashes/\(id)"
            let page = try await client.page(path, session)
            #expect(page.status == .ok)
            #expect(!String(buffer: page.body).contains("id=\"resolved-in\""))  // open: no "fixed in" badge
            let csrf = try #require(try page.csrf())

            // Without a token, or with another session's token: 403 and nothing changes.
            let missing = try await client.postForm(path, ["action": "resolve", "resolvedIn": "2.0.1"], cookies: [session.pair])
            #expect(missing.status == .forbidden)
            let other = try await client.signIn(token: p.readToken, expecting: p.project)
            let otherCSRF = try #require(try await client.page(path, other).csrf())
            #expect(otherCSRF != csrf)
            let crossed = try await client.postForm(
                path, ["action": "resolve", "resolvedIn": "2.0.1", "csrf": otherCSRF], cookies: [session.pair])
            #expect(crossed.status == .forbidden)
            // Without a session at all: to sign-in, nothing changes.
            let anonymous = try await client.postForm(path, ["action": "ignore", "csrf": csrf], cookies: [])
            #expect(anonymous.status == .seeOther && anonymous.headers[.location] == "/")
            var group = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(group.json["status"] as? String == "open")

            let resolved = try await client.postForm(
                path, ["action": "resolve", "resolvedIn": " 2.0.1 ", "csrf": csrf], cookies: [session.pair])
            #expect(resolved.status == .seeOther)
            #expect(resolved.headers[.location] == path + "?triaged=resolved")
            group = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(group.json["status"] as? String == "resolved")
            #expect(group.json["resolvedIn"] as? String == "2.0.1")
            let shown = String(buffer: try await client.page(path + "?triaged=resolved", session).body)
            #expect(shown.contains("Marked as resolved in 2.0.1."))
            #expect(shown.contains("<span class=\"badge\" id=\"resolved-in\">fixed in 2.0.1</span>"))
            #expect(shown.contains("id=\"reopen-form\""))

            #expect(try await client.postForm(path, ["action": "ignore", "csrf": csrf], cookies: [session.pair]).status == .seeOther)
            group = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(group.json["status"] as? String == "ignored")
            #expect(try await client.postForm(path, ["action": "reopen", "csrf": csrf], cookies: [session.pair]).status == .seeOther)
            group = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(group.json["status"] as? String == "open")
            #expect(group.json["resolvedIn"] is NSNull)
            let bad = try await client.postForm(path, ["action": "delete", "csrf": csrf], cookies: [session.pair])
            #expect(bad.status == .badRequest)
            #expect(String(buffer: bad.body).contains("action: must be resolve, ignore or reopen"))

            // Sign-out needs the token too, and clears the cookie.
            #expect(try await client.postForm("/signout", [:], cookies: [session.pair]).status == .forbidden)
            let out = try await client.postForm("/signout", ["csrf": csrf], cookies: [session.pair])
            #expect(out.status == .seeOther)
            #expect(out.setCookie(DashboardSessions.loopback.cookieName)?.flags.contains("Max-Age=0") == true)
        }
    }

    @Test func topCrashesPageListsFiltersAndPages() async throws {
        let p = try await makeProject()
        let now = Date()
        var reports: [TestReport] = []
        // Distinct words: the normalizer folds numbers, so "crash 1" and "crash 2" are one group.
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        let words: [String] = (0..<30).map { i in "module" + String(letters[i % 26]) + String(letters[i / 26]) }
        for i in 0..<30 {
            for j in 0...(i % 3) {
                reports.append(
                    queryReport(
                        "crash in \(words[i])", at: now.addingTimeInterval(-Double(60 * (i + j + 1))), version: i < 10 ? "1.0.0" : "2.0.0",
                        fatal: i % 2 == 0))
            }
        }
        let seeded = reports
        try await withApp { client in
            try await client.send(seeded, key: p.ingestKey)
            let session = try await client.signIn(token: p.readToken, expecting: p.project)
            let first = try await client.page("/projects/\(p.project)/crashes", session)
            #expect(first.status == .ok)
            let html = String(buffer: first.body)
            #expect(html.matches(of: /class="crash-row"/).count == DashboardController<PostgresDashboardStore>.pageSize)
            #expect(html.contains("badge new"))
            #expect(html.contains("badge fatal"))
            #expect(html.contains("<polyline points=\""))
            let next = try #require(html.firstMatch(of: /href="([^"]+)" id="next-page"/)?.1)
            let second = try await client.page(String(next).replacingOccurrences(of: "&amp;", with: "&"), session)
            #expect(second.status == .ok)
            #expect(String(buffer: second.body).matches(of: /class="crash-row"/).count == 5)
            let filtered = try await client.page("/projects/\(p.project)/crashes?version=1.0.0&os=&kind=", session)
            #expect(String(buffer: filtered.body).matches(of: /class="crash-row"/).count == 10)
            let bad = try await client.page("/projects/\(p.project)/crashes?kind=nonsense", session)
            #expect(bad.status == .badRequest)
            #expect(String(buffer: bad.body).contains("kind: not one of"))
            let overview = String(buffer: try await client.page("/projects/\(p.project)?window=24h", session).body)
            #expect(overview.contains("id=\"total-reports\">\(DashboardFormat.number(Int64(seeded.count)))<"))
            let fatal = seeded.filter { $0["fatal"] as? Bool == true }.count
            #expect(overview.contains("id=\"fatal-reports\">\(fatal)<"))
            #expect(overview.contains("id=\"new-groups\">10+<"))
        }
    }

    @Test func listTrendAndFatalStatsInTheAPI() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 2)
        let h = TimeWindow.hour
        let reports = [
            queryReport("a", at: base.addingTimeInterval(1 * h + 60), fatal: true),
            queryReport("a", at: base.addingTimeInterval(1 * h + 120)),
            queryReport("a", at: base.addingTimeInterval(5 * h), version: "2.0"),
            queryReport("b", at: base.addingTimeInterval(26 * h), fatal: true),
        ]
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let window = "from=\(q(base))&to=\(q(base.addingTimeInterval(48 * h)))"
            let hourly = try await client.query("/v1/projects/\(p.project)/crashes?\(window)&trend=hour", token: p.readToken)
            #expect(hourly.status == .ok)
            let a = try #require(hourly.json.groups.titled("a"))
            let trend = try #require(a["trend"] as? [[String: Any]])
            #expect(trend.count == 48)
            #expect(trend.map { $0["count"] as? Int } == (0..<48).map { $0 == 1 ? 2 : $0 == 5 ? 1 : 0 })
            #expect(trend.first?["t"] as? String == RFC3339.format(base))
            let daily = try await client.query(
                "/v1/projects/\(p.project)/crashes?\(window)&trend=day&version=2.0", token: p.readToken)
            #expect(daily.json.groups.titled("a")?["trend"].flatMap { $0 as? [[String: Any]] }?.map { $0["count"] as? Int } == [1, 0])
            let plain = try await client.query("/v1/projects/\(p.project)/crashes?\(window)", token: p.readToken)
            #expect(plain.json.groups.titled("a")?["trend"] == nil)
            let bad = try await client.query("/v1/projects/\(p.project)/crashes?trend=week", token: p.readToken)
            #expect(bad.status == .badRequest)
            #expect(bad.json.error.hasPrefix("trend:"))

            let stats = try await client.query(
                "/v1/projects/\(p.project)/stats?\(window)&interval=day&groupBy=fatal", token: p.readToken)
            #expect(stats.status == .ok)
            let series = try #require(stats.json["series"] as? [[String: Any]])
            #expect(series.map { $0["key"] as? String } == ["fatal", "nonFatal"])
            let counts = series.map { ($0["points"] as? [[String: Any]] ?? []).map { $0["count"] as? Int } }
            #expect(counts == [[1, 1], [2, 0]])
        }
    }

    /// One sparkline point per trend bucket: a 7-day window is hourly, 168 points (the contract's
    /// "an hourly or daily sparkline").
    @Test func sparklinesHaveAPointPerBucket() {
        let now = Date()
        let body = GroupBody(
            id: "7", signature: "s", kind: "exception", groupingVersion: "v2", title: "t", count: 168, devices: 1,
            firstSeen: now.addingTimeInterval(-7 * 86_400), lastSeen: now, status: .open, resolvedIn: nil, fatal: false,
            versions: ["1.0"], trend: (0..<168).map { TimeCount(t: now.addingTimeInterval(Double($0 - 168) * 3600), count: Int64($0 % 5)) })
        let view = GroupView(body, project: ProjectRef(id: 1, slug: "demo"), now: now)
        #expect(view.sparkLine.split(separator: " ").count == 168)
        let (line, area) = DashboardFormat.sparkline([0, 10, 5])
        #expect(line == "0.0,27.0 60.0,2.0 120.0,14.5")
        #expect(area == "0,28.0 0.0,27.0 60.0,2.0 120.0,14.5 120.0,28.0")
    }

    /// A row answers Mustache from a switch instead of a `Mirror` (`GroupView: MustacheParent`):
    /// every stored property must be answered, with the value a `Mirror` gives, for a
    /// resolved and an open group (so a property added later without a case fails here);
    /// `resolvedIn` answers its text, or `false` when absent, so its section renders nothing.
    @Test func groupViewAnswersEveryPropertyLikeItsMirror() throws {
        let now = Date()
        let project = ProjectRef(id: 1, slug: "demo")
        for resolvedIn in ["2.0.1", nil] as [String?] {
            let body = GroupBody(
                id: "7", signature: "s", kind: "exception", groupingVersion: "v2", title: "<b>boom</b>", count: 3, devices: 2,
                firstSeen: now.addingTimeInterval(-7200), lastSeen: now, status: resolvedIn == nil ? .open : .resolved,
                resolvedIn: resolvedIn, fatal: true, versions: ["2.0.0", "1.9.3"],
                trend: [0, 4, 1].map { TimeCount(t: now, count: $0) })
            let view = GroupView(body, project: project, now: now)
            let mirror = Mirror(reflecting: view)
            #expect(mirror.children.count == 20)
            for case let (label?, value) in mirror.children {
                let answer = view.child(named: label)
                #expect(answer != nil, "no answer for \(label)")
                // `resolvedIn` answers its text, or `false` when absent (see the view).
                let expected: Any = label == "resolvedIn" ? resolvedIn.map { $0 as Any } ?? false : value
                #expect(String(describing: answer.map { $0 } ?? "absent") == String(describing: expected), "\(label)")
            }
            let badge = try MustacheTemplate(string: "{{#resolvedIn}}fixed in {{resolvedIn}}{{/resolvedIn}}{{^resolvedIn}}-{{/resolvedIn}}")
            #expect(badge.render(view) == (resolvedIn.map { "fixed in \($0)" } ?? "-"))
            #expect(view.child(named: "noSuchName") == nil)
        }
    }

    @Test func terminalTableStripsControlCharacters() {
        let now = Date()
        let group = GroupBody(
            id: "1", signature: "s", kind: "custom", groupingVersion: "v2", title: "evil \u{1B}[2Jclear\u{7}", count: 12345, devices: 3,
            firstSeen: now.addingTimeInterval(-3600), lastSeen: now, status: .open, resolvedIn: nil, fatal: true,
            versions: ["1.2.0"], trend: [0, 1, 5, 0].map { TimeCount(t: now, count: $0) })
        let text = TopCrashesTable.format([group], header: "h", now: now, titleWidth: 60)
        #expect(!text.contains("\u{1B}"))
        #expect(!text.contains("\u{7}"))
        #expect(text.contains("evil ?[2Jclear?"))
        #expect(text.contains("12,345"))
        #expect(text.contains("1 h ago new"))
        #expect(text.contains(" ▂█ "))
    }
}

/// A cookie from a `Set-Cookie` header.
struct SetCookie: Sendable {
    var name: String
    var value: String
    var flags: [String]
    var pair: String { "\(name)=\(value)" }
}

extension TestResponse {
    /// The `Set-Cookie` of `name`, if the response sets it.
    func setCookie(_ name: String) -> SetCookie? {
        for header in headers[values: .setCookie] {
            let parts = header.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let first = parts.first, first.hasPrefix(name + "=") else { continue }
            return SetCookie(name: name, value: String(first.dropFirst(name.count + 1)), flags: Array(parts.dropFirst()))
        }
        return nil
    }

    /// The first form's CSRF token in an HTML body.
    func csrf() throws -> String? {
        String(buffer: body).firstMatch(of: /name="csrf" value="([^"]+)"/).map { String($0.1) }
    }
}

extension TestClientProtocol {
    /// A GET with the session cookie.
    func page(_ uri: String, _ session: SetCookie?) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let session { headers[.cookie] = session.pair }
        return try await execute(uri: uri, method: .get, headers: headers)
    }

    /// A form POST with these cookies.
    func postForm(_ uri: String, _ fields: [String: String], cookies: [String]) async throws -> TestResponse {
        var headers: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
        if !cookies.isEmpty { headers[.cookie] = cookies.joined(separator: "; ") }
        let allowed = CharacterSet.alphanumerics
        let body = fields.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
            .joined(separator: "&")
        return try await execute(uri: uri, method: .post, headers: headers, body: ByteBuffer(string: body))
    }

    /// Sends `reports` with the project's ingest key, signs in with its read token and opens
    /// the last day's crash list, which must answer 200; returns the session and the list's HTML.
    func crashList(
        after reports: [TestReport], in p: ProjectCredentials, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (session: SetCookie, html: String) {
        try await send(reports, key: p.ingestKey)
        let session = try await signIn(token: p.readToken, expecting: p.project)
        let list = try await page("/projects/\(p.project)/crashes?window=24h", session)
        #expect(list.status == .ok, sourceLocation: sourceLocation)
        return (session, String(buffer: list.body))
    }

    /// Signs in through the form; expects the redirect to the project and returns the session
    /// cookie (named as `sessions` names it: the default public URL is http on loopback).
    func signIn(
        token: String, expecting project: String, sessions: DashboardSessions = .loopback
    ) async throws -> SetCookie {
        let form = try await execute(uri: "/", method: .get)
        let pre = try #require(form.setCookie(sessions.signInCookieName))
        let response = try await postForm("/signin", ["token": token, "csrf": try #require(try form.csrf())], cookies: [pre.pair])
        #expect(response.status == .seeOther)
        #expect(response.headers[.location] == "/projects/\(project)")
        return try #require(response.setCookie(sessions.cookieName))
    }
}

extension DashboardSessions {
    /// The cookie names of a server whose public URL is http on loopback (the default).
    static let loopback = DashboardSessions(secret: [0], secure: false)
    /// The cookie names of any other server (`__Host-`).
    static let secured = DashboardSessions(secret: [0], secure: true)
}
