import CrashGrouping
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Projects made by server admins through `POST /v1/projects`, sentry-cli's chunk upload with
/// an API token, and an audit entry for every kind of change accounts.md lists, on the real
/// database (accounts.md, "Projects, members, roles", "API tokens", "Who did what").
@Suite struct ProjectAdministrationTests {
    @Test func serverAdminsCreateProjectsThroughTheAPI() async throws {
        let admin = try await AccountTests.createUser(AccountTests.email(), password: AccountTests.password, admin: true)
        let user = try await AccountTests.createUser(AccountTests.email(), password: AccountTests.password)
        let existing = try await makeProject()
        try await TokenTests.setRole(.admin, of: user, on: existing.project)
        let secret = try await TokenTests.token(for: admin, scopes: [.projectAdmin])
        let readOnly = try await TokenTests.token(for: admin, scopes: [.projectRead])
        let userSecret = try await TokenTests.token(for: user, scopes: [.projectAdmin])
        let slug = "t-" + UUID().uuidString.lowercased().prefix(18).replacingOccurrences(of: "-", with: "")
        try await withApp { client in
            let body = #"{"name": "\#(slug)", "grouping": "v1"}"#
            let created = try await client.query("/v1/projects", token: secret, method: .post, body: body)
            #expect(created.status == .created)
            #expect(created.json["project"] as? String == slug)
            let ingestKey = try #require(created.json["ingestKey"] as? String)
            let readToken = try #require(created.json["readToken"] as? String)
            let sentryID = try #require((created.json["sentryId"] as? NSNumber)?.int64Value)
            #expect(ingestKey.hasPrefix("cgi_") && readToken.hasPrefix("cgr_"))
            #expect(created.json["sentryDsn"] as? String == "http://\(ingestKey)@127.0.0.1:8080/\(sentryID)")
            // The keys work at once, and the project groups as asked.
            try await client.send([queryReport("made by the API", at: Date().addingTimeInterval(-60))], key: ingestKey)
            #expect(try await client.query("/v1/projects/\(slug)/crashes", token: readToken).json.groups.count == 1)
            let grouping = try await withTestDatabase { try await PostgresProjectStore(database: $0).groupingVersion(slug: slug) }
            #expect(grouping == .v1)

            // A name taken keeps its keys: 409 naming the field.
            let again = try await client.query("/v1/projects", token: secret, method: .post, body: body)
            #expect(again.status == .conflict)
            #expect((again.json["error"] as? String)?.hasPrefix("name:") == true)
            #expect(try await client.query("/v1/projects/\(slug)/crashes", token: readToken).status == .ok)
            for (bad, field) in [
                (#"{"name": "Bad Name"}"#, "name:"), ("{}", "name:"), (#"{"name": "x-\#(slug)", "grouping": "v9"}"#, "grouping:"),
            ] {
                let refused = try await client.query("/v1/projects", token: secret, method: .post, body: bad)
                #expect(refused.status == .badRequest, "\(bad)")
                #expect((refused.json["error"] as? String)?.hasPrefix(field) == true, "\(bad): \(refused.json)")
            }

            // Only server admins, with project:admin; never a read token.
            let other = #"{"name": "x-\#(slug)"}"#
            let notAdmin = try await client.query("/v1/projects", token: userSecret, method: .post, body: other)
            #expect(notAdmin.status == .forbidden)
            let noScope = try await client.query("/v1/projects", token: readOnly, method: .post, body: other)
            #expect(noScope.status == .forbidden && noScope.json["error"] as? String == "missing scope project:admin")
            #expect(try await client.query("/v1/projects", token: existing.readToken, method: .post, body: other).status == .forbidden)
            #expect(try await client.query("/v1/projects", token: nil, method: .post, body: other).status == .unauthorized)
            #expect(try await withTestDatabase { try await PostgresProjectStore(database: $0).project(slug: "x-\(slug)") } == nil)

            // The audit log names the admin's token.
            let audit = try await client.query("/v1/audit?project=\(slug)", token: secret)
            let entry = try #require((audit.json["entries"] as? [[String: Any]])?.first { $0["action"] as? String == "project.create" })
            #expect((entry["actor"] as? [String: Any])?["type"] as? String == "token" && entry["target"] as? String == slug)
        }
    }

    @Test func sentryCLIChunkUploadTakesAnAPITokenWithDebugFilesWrite() async throws {
        let user = try await AccountTests.createUser(AccountTests.email(), password: AccountTests.password)
        let p = try await makeProject()
        let q = try await makeProject()
        try await TokenTests.setRole(.admin, of: user, on: p.project)
        try await TokenTests.setRole(.member, of: user, on: q.project)
        let single = try await Self.token(for: user, scopes: [.debugFilesWrite], projects: [p.project])
        let every = try await Self.token(for: user, scopes: [.debugFilesWrite], projects: nil)
        let readOnly = try await Self.token(for: user, scopes: [.projectRead], projects: [p.project])
        let file = Array("not a debug file, only chunk bytes \(UUID())".utf8)
        let sum = ChunkUploadTests.sha1(file)
        try await withApp { client in
            // A token limited to one project: its chunks go there, whatever the org slug.
            #expect(try await Self.options(client, single, org: "any-org").status == .ok)
            #expect(try await Self.chunk(client, single, file, org: "any-org").status == .ok)
            let stored = try await withTestDatabase { db in
                try await PostgresChunkUploadStore(database: db).missing(project: try #require(try await Self.id(p.project, db)), among: [sum])
            }
            #expect(stored.isEmpty, "the chunk is the project's")

            // A token for every project takes the org slug as the project.
            let unnamed = try await Self.options(client, every, org: "any-org")
            #expect(unnamed.status == .notFound)
            #expect((unnamed.json["error"] as? String)?.hasPrefix("org:") == true, "\(unnamed.json)")
            #expect(try await Self.options(client, every, org: p.project).status == .ok)
            // Within the user's role: a member of q has no debug-files:write there.
            let member = try await Self.options(client, every, org: q.project)
            #expect(member.status == .forbidden && member.json["error"] as? String == "missing scope debug-files:write")
            let scopeless = try await Self.chunk(client, readOnly, file, org: "any-org")
            #expect(scopeless.status == .forbidden && scopeless.json["error"] as? String == "missing scope debug-files:write")
            #expect(try await Self.options(client, "cgt_unknown", org: p.project).status == .unauthorized)
            // The read token keeps working.
            #expect(try await Self.options(client, p.readToken, org: "any-org").status == .ok)
        }
    }

    @Test func everyKindOfChangeIsInTheAuditLog() async throws {
        let email = AccountTests.email()
        let admin = try await AccountTests.createUser(email, password: AccountTests.password, admin: true)
        let p = try await makeProject()
        let secret = try await TokenTests.token(for: admin, scopes: [.projectRead, .projectTriage, .projectAdmin, .debugFilesWrite])
        let fixture = TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/debug-files/Crashy-x86_64")
        let binary = try Data(contentsOf: fixture)
        try await withApp { client in
            let base = "/v1/projects/\(p.project)"
            try await client.send([queryReport("audited", at: Date().addingTimeInterval(-60))], key: p.ingestKey)
            let group = try #require(try await client.query("\(base)/crashes", token: secret).json.groups.first?["id"] as? String)
            // Triage and comments, one by the token, one by the read token.
            #expect(try await client.query("\(base)/crashes/\(group)", token: secret, method: .patch, body: #"{"status": "ignored"}"#).status == .ok)
            #expect(try await client.query("\(base)/crashes", token: p.readToken, method: .patch, body: #"{"status": "open"}"#).status == .ok)
            #expect(
                try await client.query("\(base)/crashes/\(group)/comments", token: secret, method: .post, body: #"{"text": "seen"}"#).status
                    == .created)
            // Webhooks and alert rules.
            let hook = try await client.query(
                "\(base)/webhooks", token: secret, method: .post, body: #"{"url": "https://example.com/hook", "events": ["group.new"]}"#)
            let hookID = try #require(hook.json["id"] as? String)
            let rule = try await client.query(
                "\(base)/alert-rules", token: secret, method: .post,
                body: #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "\#(hookID)"}]}"#)
            let ruleID = try #require(rule.json["id"] as? String, "\(rule.json)")
            #expect(try await client.query("\(base)/alert-rules/\(ruleID)", token: secret, method: .delete).status == .noContent)
            #expect(try await client.query("\(base)/webhooks/\(hookID)", token: secret, method: .delete).status == .noContent)
            // A debug file.
            let upload = try await client.execute(
                uri: "\(base)/debug-files?name=Crashy", method: .post,
                headers: [.authorization: "Bearer \(secret)", .contentType: "application/octet-stream"], body: ByteBuffer(bytes: binary))
            #expect(upload.status == .created || upload.status == .ok)
            // Key rotation, as the operator runs it.
            _ = try await KeyRotationTests().rotate(p.project, "--ingest-key")
            // Sign-ins: a failed one, a good one, tokens made and revoked there, sign-out.
            _ = try await client.passwordSignIn(email, "not the password at all")
            let session = try #require(
                try await client.passwordSignIn(email, AccountTests.password).setCookie(DashboardSessions.loopback.cookieName))
            let token = try await client.json("/v1/tokens", method: .post, cookie: session.pair, body: #"{"name": "t", "scopes": ["project:read"]}"#)
            let tokenID = try #require(token.json["id"] as? String)
            #expect(try await client.json("/v1/tokens/\(tokenID)", method: .delete, cookie: session.pair).status == .noContent)

            let inProject = try await client.query("/v1/audit?project=\(p.project)&limit=200", token: secret)
            let actions = Set((inProject.json["entries"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String })
            for action in [
                "group.triage", "group.bulk-triage", "group.comment", "webhook.create", "webhook.delete", "alert-rule.create",
                "alert-rule.delete", "debug-file.upload", "project.rotate-keys",
            ] {
                #expect(actions.contains(action), "no \(action) in \(actions.sorted())")
            }
            let mine = try await client.query("/v1/audit?actor=\(email)&limit=200", token: secret)
            let byUser = Set((mine.json["entries"] as? [[String: Any]] ?? []).compactMap { $0["action"] as? String })
            for action in ["user.sign-in", "user.sign-in-failed", "token.create", "token.revoke"] {
                #expect(byUser.contains(action), "no \(action) in \(byUser.sorted())")
            }
        }
    }

    // MARK: - Helpers

    /// A token of `user` for `projects`, stored as `POST /v1/tokens` stores one.
    static func token(for user: User, scopes: [TokenScope], projects: [String]?) async throws -> String {
        let secret = APITokenSecret.generate()
        try await withTestDatabase { db in
            _ = try await PostgresTokenStore(database: db).create(
                user: user.id, name: "test", secretHash: ProjectKeys.hash(secret), scopes: scopes, projects: projects, expiresAt: nil)
        }
        return secret
    }

    static func id(_ slug: String, _ db: CrashDatabase) async throws -> Int64? {
        try await PostgresProjectStore(database: db).project(slug: slug)?.id
    }

    static func options(
        _ client: some TestClientProtocol, _ token: String, org: String
    ) async throws -> (
        status: HTTPResponse.Status, json: [String: Any]
    ) {
        try await client.query("/api/0/organizations/\(org)/chunk-upload/", token: token)
    }

    static func chunk(
        _ client: some TestClientProtocol, _ token: String, _ bytes: [UInt8], org: String
    ) async throws -> (
        status: HTTPResponse.Status, json: [String: Any]
    ) {
        let name = ChunkUploadTests.sha1(bytes)
        var body = Array("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(name)\"\r\n".utf8)
        body += Array("Content-Type: application/octet-stream\r\n\r\n".utf8) + bytes + Array("\r\n--XyZ--\r\n".utf8)
        let response = try await client.execute(
            uri: "/api/0/organizations/\(org)/chunk-upload/", method: .post,
            headers: [.authorization: "Bearer \(token)", .contentType: "multipart/form-data; boundary=XyZ"], body: ByteBuffer(bytes: body))
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
        return (response.status, json)
    }
}
