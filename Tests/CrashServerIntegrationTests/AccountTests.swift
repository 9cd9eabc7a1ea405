import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Users, passwords, sessions and roles on the dashboard, on the real database
/// (accounts.md): set-up links work once, wrong passwords and the rate limit answer alike
/// for known and unknown accounts, disabling ends sessions, a user sees only its projects.
@Suite struct AccountTests {
    static let password = "correct horse battery staple"

    @Test func setupLinkWorksOnceThenPasswordSignIn() async throws {
        let email = Self.email()
        let link = try await Self.createUser(email)
        #expect(link.hasPrefix("http://127.0.0.1:8080/setup/"))
        let path = String(link.dropFirst("http://127.0.0.1:8080".count))
        try await withApp { client in
            let page = try await client.execute(uri: path, method: .get)
            #expect(page.status == .ok)
            #expect(String(buffer: page.body).contains(email))
            let pre = try #require(page.setCookie(DashboardSessions.loopback.signInCookieName))
            // Too short: 400, the link still works.
            let short = try await client.postForm(path, ["password": "short", "csrf": try #require(try page.csrf())], cookies: [pre.pair])
            #expect(short.status == .badRequest)
            let set = try await client.postForm(path, ["password": Self.password, "csrf": try #require(try page.csrf())], cookies: [pre.pair])
            #expect(set.status == .seeOther)
            let session = try #require(set.setCookie(DashboardSessions.loopback.cookieName))
            let home = try await client.page("/", session)
            #expect(home.status == .ok)
            #expect(String(buffer: home.body).contains("Signed in as \(email)"))
            // The link is used: a second visit and a second password are refused.
            #expect(try await client.execute(uri: path, method: .get).status == .notFound)
            let again = try await client.postForm(
                path, ["password": "another password 123", "csrf": try #require(try page.csrf())], cookies: [pre.pair])
            #expect(again.status == .notFound)
            // The password signs in (e-mail in another case), a wrong one does not.
            let signedIn = try await client.passwordSignIn(email.uppercased(), Self.password)
            #expect(signedIn.status == .seeOther)
            #expect(signedIn.setCookie(DashboardSessions.loopback.cookieName) != nil)
            let wrong = try await client.passwordSignIn(email, "not the password at all")
            #expect(wrong.status == .unauthorized)
            #expect(wrong.setCookie(DashboardSessions.loopback.cookieName) == nil)
            #expect(String(buffer: wrong.body).contains("Wrong e-mail or password."))
        }
    }

    @Test func tenFailuresLimitTheAccountAndUnknownAccountsAlike() async throws {
        let email = Self.email()
        try await Self.createUser(email, password: Self.password)
        let unknown = Self.email()
        try await withApp { client in
            for _ in 0..<10 {
                #expect(try await client.passwordSignIn(email, "wrong password 0000").status == .unauthorized)
                #expect(try await client.passwordSignIn(unknown, "wrong password 0000").status == .unauthorized)
            }
            // The 11th attempt is refused before the password is looked at, even the right one.
            let limited = try await client.passwordSignIn(email, Self.password)
            #expect(limited.status == .tooManyRequests)
            let limitedUnknown = try await client.passwordSignIn(unknown, Self.password)
            #expect(limitedUnknown.status == .tooManyRequests)
            #expect(String(buffer: limited.body).contains("Too many failed sign-ins"))
            #expect(String(buffer: limitedUnknown.body).contains("Too many failed sign-ins"))
        }
    }

    @Test func disablingEndsSessionsAndSignOutEndsOne() async throws {
        let email = Self.email()
        try await Self.createUser(email, password: Self.password)
        try await withApp { client in
            let first = try #require(try await client.passwordSignIn(email, Self.password).setCookie(DashboardSessions.loopback.cookieName))
            let second = try #require(try await client.passwordSignIn(email, Self.password).setCookie(DashboardSessions.loopback.cookieName))
            #expect(try await client.page("/", first).status == .ok)
            // Sign-out ends that session only.
            let home = try await client.page("/", first)
            let out = try await client.postForm("/signout", ["csrf": try #require(try home.csrf())], cookies: [first.pair])
            #expect(out.status == .seeOther)
            #expect(try await client.page("/", first).status == .ok)  // the sign-in page again
            #expect(!String(buffer: try await client.page("/", first).body).contains("Signed in as"))
            #expect(String(buffer: try await client.page("/", second).body).contains("Signed in as"))
            // Disabling ends the other at once, and the password no longer works.
            _ = try await withTestDatabase {
                try await UserAdministration(database: $0, publicURL: "http://127.0.0.1:8080", logger: TestEnvironment.logger).disable(email: email)
            }
            #expect(!String(buffer: try await client.page("/", second).body).contains("Signed in as"))
            #expect(try await client.passwordSignIn(email, Self.password).status == .unauthorized)
        }
    }

    @Test func aUserSeesOnlyItsProjectsAndAViewerCannotTriage() async throws {
        let email = Self.email()
        let user = try await Self.createUser(email, password: Self.password)
        let mine = try await makeProject()
        let other = try await makeProject()
        try await withTestDatabase { db in
            let ref = try #require(try await PostgresMemberStore(database: db).access(user: Self.admin, project: mine.project)).0
            try await PostgresMemberStore(database: db).setRole(project: ref.id, user: user.id, role: .viewer)
        }
        let report = queryReport("viewer cannot triage", at: Date().addingTimeInterval(-300))
        try await withApp { client in
            try await client.send([report], key: mine.ingestKey)
            let session = try #require(try await client.passwordSignIn(email, Self.password).setCookie(DashboardSessions.loopback.cookieName))
            let home = String(buffer: try await client.page("/", session).body)
            #expect(home.contains("/projects/\(mine.project)"))
            #expect(!home.contains(other.project))
            #expect(try await client.page("/projects/\(mine.project)", session).status == .ok)
            #expect(try await client.page("/projects/\(other.project)", session).status == .notFound)
            let list = try await client.query("/v1/projects/\(mine.project)/crashes", token: mine.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let path = "/projects/\(mine.project)/crashes/\(id)"
            let page = try await client.page(path, session)
            #expect(page.status == .ok)
            let triage = try await client.postForm(path, ["action": "ignore", "csrf": try #require(try page.csrf())], cookies: [session.pair])
            #expect(triage.status == .forbidden)
            // The members page lists the viewer, without the admin's forms.
            let members = String(buffer: try await client.page("/projects/\(mine.project)/members", session).body)
            #expect(members.contains(email))
            #expect(!members.contains("id=\"member-form\""))
        }
    }

    @Test func theTokensPageMakesATokenShownOnceAndRevokesIt() async throws {
        let email = Self.email()
        let user = try await Self.createUser(email, password: Self.password)
        let p = try await makeProject()
        try await TokenTests.setRole(.viewer, of: user, on: p.project)
        try await withApp { client in
            let session = try #require(try await client.passwordSignIn(email, Self.password).setCookie(DashboardSessions.loopback.cookieName))
            let page = try await client.page("/tokens", session)
            #expect(page.status == .ok)
            let csrf = try #require(try page.csrf())
            let made = try await client.postForm(
                "/tokens", ["action": "create", "name": "laptop", "projectRead": "on", "csrf": csrf], cookies: [session.pair])
            #expect(made.status == .ok)
            let secret = try #require(String(buffer: made.body).firstMatch(of: /id="new-token">(cgt_[A-Za-z0-9_-]+)</).map { String($0.1) })
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: secret).status == .ok)
            // The list never shows it again; revoking ends it.
            let list = String(buffer: try await client.page("/tokens", session).body)
            #expect(list.contains("laptop") && !list.contains(secret))
            let id = try #require(list.firstMatch(of: /name="id" value="([0-9]+)"/).map { String($0.1) })
            let revoked = try await client.postForm("/tokens", ["action": "revoke", "id": id, "csrf": csrf], cookies: [session.pair])
            #expect(revoked.status == .seeOther)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: secret).status == .unauthorized)
            // Without the CSRF token: refused.
            let forged = try await client.postForm("/tokens", ["action": "create", "name": "x", "projectRead": "on"], cookies: [session.pair])
            #expect(forged.status == .forbidden)
        }
    }

    // MARK: - Helpers

    static func email() -> String { "u-\(UUID().uuidString.prefix(8).lowercased())@example.com" }

    /// A server admin (not stored): `access` answers for it without a membership.
    static let admin = User(id: 0, email: "admin@example.com", name: "", isAdmin: true, disabled: false, hasPassword: false)

    /// Creates a user through the command line's code; returns its set-up link.
    @discardableResult
    static func createUser(_ email: String, admin: Bool = false) async throws -> String {
        let json = try await withTestDatabase {
            try await UserAdministration(database: $0, publicURL: "http://127.0.0.1:8080", logger: TestEnvironment.logger)
                .create(email: email, name: "", admin: admin)
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        return try #require(object["setupUrl"] as? String)
    }

    /// Creates a user with a password already set.
    @discardableResult
    static func createUser(_ email: String, password: String, admin: Bool = false) async throws -> User {
        let link = try await createUser(email, admin: admin)
        let token = String(try #require(link.split(separator: "/").last))
        return try await withTestDatabase { db in
            let accounts = AccountService(
                users: PostgresUserStore(database: db), cookies: .loopback, publicURL: "http://127.0.0.1:8080",
                logger: TestEnvironment.logger)
            return try #require(try await accounts.setPassword(token: token, password: password))
        }
    }
}

extension TestClientProtocol {
    /// Posts the sign-in page's password form (with its pre-session cookie and CSRF token).
    func passwordSignIn(_ email: String, _ password: String) async throws -> TestResponse {
        let form = try await execute(uri: "/", method: .get)
        let pre = try #require(form.setCookie(DashboardSessions.loopback.signInCookieName))
        return try await postForm(
            "/signin", ["email": email, "password": password, "csrf": try #require(try form.csrf())], cookies: [pre.pair])
    }
}
