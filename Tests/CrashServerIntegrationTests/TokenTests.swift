import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// API tokens, roles per route, members and the audit log through the API, on the real
/// database (accounts.md).
@Suite struct TokenTests {
    /// Every route a read token or an API token can reach declares the scope it needs: a new
    /// route without one fails here (and is refused to every API token).
    @Test func everyAuthenticatedRouteDeclaresAScope() async throws {
        let config = TestEnvironment.configuration()
        let database = try CrashDatabase(configuration: config, logger: TestEnvironment.logger)
        let batcher = IngestBatcher(
            maxQueuedReports: 1, maxBatchReports: 1, maxBatchBytes: .max, timeout: .seconds(60), metrics: ServerMetrics(),
            logger: TestEnvironment.logger, store: { items, _ in Set(items.map(\.key)) }, probe: {})
        let router = try buildRouter(
            database: database, batcher: batcher, metrics: ServerMetrics(), configuration: config, timeout: .seconds(60),
            logger: TestEnvironment.logger)
        var checked = 0
        for route in router.routes where !RouteScopes.isUnscoped(route.path.description) {
            checked += 1
            #expect(RouteScopes.scope(method: route.method, path: route.path.description) != nil, "no scope declared for \(route)")
        }
        #expect(checked >= 20)
        #expect(RouteScopes.isUnscoped("/v1/reports") && RouteScopes.isUnscoped("/projects/{project}/crashes"))
    }

    @Test func tokensCarryScopesWithinTheUsersRoleAndRevocationIsImmediate() async throws {
        let email = AccountTests.email()
        let user = try await AccountTests.createUser(email, password: AccountTests.password)
        let p = try await makeProject()
        let other = try await makeProject()
        try await Self.setRole(.member, of: user, on: p.project)
        let report = queryReport("token triage", at: Date().addingTimeInterval(-300))
        try await withApp { client in
            try await client.send([report], key: p.ingestKey)
            let session = try #require(
                try await client.passwordSignIn(email, AccountTests.password).setCookie(DashboardSessions.loopback.cookieName))
            // Created from the dashboard's session (JSON only), shown once.
            let created = try await client.json(
                "/v1/tokens", method: .post, cookie: session.pair,
                body: #"{"name": "ci", "scopes": ["project:read", "project:triage", "project:admin"], "projects": null}"#)
            #expect(created.status == .created)
            let secret = try #require(created.json["token"] as? String)
            let id = try #require(created.json["id"] as? String)
            #expect(secret.hasPrefix("cgt_") && secret.count >= 4 + 22)
            let form = try await client.execute(
                uri: "/v1/tokens", method: .post,
                headers: [.cookie: session.pair, .contentType: "application/x-www-form-urlencoded"], body: ByteBuffer(string: "name=x"))
            #expect(form.status == .unsupportedMediaType)
            let listed = try await client.query("/v1/tokens", token: nil)
            #expect(listed.status == .unauthorized)

            // Reads and triage within the member's role; admin routes refused by the role.
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: secret)
            #expect(list.status == .ok)
            let group = try #require(list.json.groups.first?["id"] as? String)
            let patch = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(group)", token: secret, method: .patch, body: #"{"status": "ignored"}"#)
            #expect(patch.status == .ok)
            let hooks = try await client.query("/v1/projects/\(p.project)/webhooks", token: secret)
            #expect(hooks.status == .forbidden)
            #expect(hooks.json["error"] as? String == "missing scope project:admin")
            #expect(try await client.query("/v1/projects/\(other.project)/crashes", token: secret).status == .notFound)

            // Demoted to viewer: the same token can no longer triage, still reads.
            try await Self.setRole(.viewer, of: user, on: p.project)
            let demoted = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(group)", token: secret, method: .patch, body: #"{"status": "open"}"#)
            #expect(demoted.status == .forbidden)
            #expect(demoted.json["error"] as? String == "missing scope project:triage")
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: secret).status == .ok)

            // A read-only token: 403 naming the scope it lacks.
            let readOnly = try await client.json(
                "/v1/tokens", method: .post, cookie: session.pair, body: #"{"name": "ro", "scopes": ["project:read"], "projects": ["\#(p.project)"]}"#
            )
            let readSecret = try #require(readOnly.json["token"] as? String)
            try await Self.setRole(.admin, of: user, on: p.project)
            let noScope = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(group)", token: readSecret, method: .patch, body: #"{"status": "open"}"#)
            #expect(noScope.json["error"] as? String == "missing scope project:triage")
            #expect(try await client.query("/v1/tokens", token: readSecret).status == .forbidden)
            let bad = try await client.json("/v1/tokens", method: .post, cookie: session.pair, body: #"{"name": "x", "scopes": ["root"]}"#)
            #expect(bad.status == .badRequest)
            #expect((bad.json["error"] as? String)?.hasPrefix("scopes:") == true)

            // Listed without secrets; revoked: the next request fails.
            let tokens = try await client.json("/v1/tokens", method: .get, cookie: session.pair)
            let rows = try #require(tokens.json["tokens"] as? [[String: Any]])
            #expect(rows.count == 2 && rows.allSatisfy { $0["token"] == nil })
            #expect(try await client.json("/v1/tokens/\(id)", method: .delete, cookie: session.pair).status == .noContent)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: secret).status == .unauthorized)
            // The read token keeps working unchanged.
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken).status == .ok)
        }
    }

    @Test func membersByAdminsOnlyAndTheAuditLogNamesWhoDidWhat() async throws {
        let adminEmail = AccountTests.email()
        let admin = try await AccountTests.createUser(adminEmail, password: AccountTests.password, admin: true)
        let memberEmail = AccountTests.email()
        let member = try await AccountTests.createUser(memberEmail, password: AccountTests.password)
        let p = try await makeProject()
        let secret = try await Self.token(for: admin, scopes: [.projectAdmin, .projectRead, .projectTriage])
        let memberSecret = try await Self.token(for: member, scopes: [.projectAdmin, .projectRead])
        try await withApp { client in
            let path = "/v1/projects/\(p.project)/members/\(memberEmail)"
            // Not yet a member: the member's token sees no project.
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: memberSecret).status == .notFound)
            let put = try await client.query(path, token: secret, method: .put, body: #"{"role": "viewer"}"#)
            #expect(put.status == .ok)
            #expect(put.json["role"] as? String == "viewer")
            #expect(try await client.query(path, token: secret, method: .put, body: #"{"role": "owner"}"#).status == .badRequest)
            #expect(try await client.query(path, token: p.readToken).status == .forbidden)
            // A viewer's token with project:admin is cut to the role.
            let denied = try await client.query(path, token: memberSecret, method: .put, body: #"{"role": "admin"}"#)
            #expect(denied.status == .forbidden)
            #expect(denied.json["error"] as? String == "missing scope project:admin")
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: memberSecret).status == .ok)
            let members = try await client.query("/v1/projects/\(p.project)/members", token: secret)
            #expect((members.json["members"] as? [[String: Any]])?.map { $0["email"] as? String } == [memberEmail])
            // Changes through the API are in the audit log, newest first, with the actor.
            let hook = try await client.query(
                "/v1/projects/\(p.project)/webhooks", token: p.readToken, method: .post,
                body: #"{"url": "https://example.com/hook", "events": ["group.new"]}"#)
            #expect(hook.status == .created)
            #expect(try await client.query(path, token: secret, method: .delete).status == .noContent)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: memberSecret).status == .notFound)
            let audit = try await client.query("/v1/audit?project=\(p.project)", token: secret)
            #expect(audit.status == .ok)
            let entries = try #require(audit.json["entries"] as? [[String: Any]])
            #expect(entries.map { $0["action"] as? String } == ["member.remove", "webhook.create", "member.set"])
            let actor = try #require(entries.last?["actor"] as? [String: Any])
            #expect(actor["type"] as? String == "token" && actor["id"] != nil)
            #expect((entries[1]["actor"] as? [String: Any])?["type"] as? String == "readToken")
            #expect(entries.first?["target"] as? String == memberEmail)
            // Paged by cursor; a forged cursor is a 400; a non-admin sees none of it.
            let page = try await client.query("/v1/audit?project=\(p.project)&limit=2", token: secret)
            let cursor = try #require(page.json["nextCursor"] as? String)
            let rest = try await client.query("/v1/audit?project=\(p.project)&limit=2&cursor=\(cursor)", token: secret)
            #expect((rest.json["entries"] as? [[String: Any]])?.map { $0["action"] as? String } == ["member.set"])
            #expect(try await client.query("/v1/audit?cursor=x", token: secret).status == .badRequest)
            #expect(try await client.query("/v1/audit?project=\(p.project)", token: memberSecret).status == .notFound)
            // A failed sign-in is recorded for server admins.
            _ = try await client.passwordSignIn(memberEmail, "not the password at all")
            let failed = try await client.query("/v1/audit?actor=\(memberEmail)", token: secret)
            #expect((failed.json["entries"] as? [[String: Any]])?.first?["action"] as? String == "user.sign-in-failed")
        }
    }

    // MARK: - Helpers

    static func setRole(_ role: ProjectRole, of user: User, on slug: String) async throws {
        try await withTestDatabase { db in
            let project = try #require(try await PostgresMemberStore(database: db).access(user: AccountTests.admin, project: slug)).0
            try await PostgresMemberStore(database: db).setRole(project: project.id, user: user.id, role: role)
        }
    }

    /// A token of `user`, stored as `POST /v1/tokens` stores one.
    static func token(for user: User, scopes: [TokenScope]) async throws -> String {
        let secret = APITokenSecret.generate()
        try await withTestDatabase { db in
            _ = try await PostgresTokenStore(database: db).create(
                user: user.id, name: "test", secretHash: ProjectKeys.hash(secret), scopes: scopes, projects: nil, expiresAt: nil)
        }
        return secret
    }
}

extension TestClientProtocol {
    /// A JSON request with a session cookie.
    func json(
        _ uri: String, method: HTTPRequest.Method, cookie: String, body: String? = nil
    ) async throws -> (status: HTTPResponse.Status, json: [String: Any]) {
        var headers: HTTPFields = [.cookie: cookie]
        if body != nil { headers[.contentType] = "application/json" }
        let response = try await execute(uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
        return (response.status, json)
    }
}
