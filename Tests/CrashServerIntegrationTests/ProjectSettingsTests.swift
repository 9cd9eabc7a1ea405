import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// data-protection.md, "Project settings": the settings routes against real PostgreSQL, and
/// how soon another server sees a change.
@Suite("Project settings")
struct ProjectSettingsTests {
    @Test("GET shows the defaults; PATCH changes what it sends, replaces lists, resets retention with null")
    func lifecycle() async throws {
        let p = try await makeProject()
        let other = try await makeProject()
        let config = TestEnvironment.configuration { $0.retentionDays = 45 }
        try await withApp(config) { client in
            let uri = "/v1/projects/\(p.project)/settings"
            let defaults = try await client.query(uri, token: p.readToken)
            #expect(defaults.status == .ok)
            #expect(defaults.json["scrubDefaults"] as? Bool == true)
            #expect(defaults.json["scrubIPs"] as? Bool == false && defaults.json["scrubEmails"] as? Bool == false)
            #expect(defaults.json["sensitiveFields"] as? [String] == [] && defaults.json["safeFields"] as? [String] == [])
            #expect(defaults.json["patterns"] as? [String] == [])
            #expect(defaults.json["retentionDays"] as? Int == 45)
            #expect(defaults.json["dailyQuota"] is NSNull)
            #expect(defaults.json["quotaUsedToday"] as? Int == 0)

            let patched = try await client.query(
                uri, token: p.readToken, method: .patch,
                body: #"{"scrubIPs": true, "sensitiveFields": ["pin", "otp"], "patterns": ["ord-[0-9]+"], "retentionDays": 30, "dailyQuota": 1000}"#)
            #expect(patched.status == .ok, "\(patched.json)")
            #expect(patched.json["scrubIPs"] as? Bool == true && patched.json["scrubDefaults"] as? Bool == true)
            #expect(patched.json["sensitiveFields"] as? [String] == ["pin", "otp"])
            #expect(patched.json["patterns"] as? [String] == ["ord-[0-9]+"])
            #expect(patched.json["retentionDays"] as? Int == 30 && patched.json["dailyQuota"] as? Int == 1000)

            // Lists are replaced whole; null puts retention back to the server's and removes the quota.
            let again = try await client.query(
                uri, token: p.readToken, method: .patch,
                body: #"{"sensitiveFields": ["cvv"], "retentionDays": null, "dailyQuota": null}"#)
            #expect(again.status == .ok)
            let read = try await client.query(uri, token: p.readToken)
            #expect(read.json["sensitiveFields"] as? [String] == ["cvv"])
            #expect(read.json["scrubIPs"] as? Bool == true && read.json["patterns"] as? [String] == ["ord-[0-9]+"])
            #expect(read.json["retentionDays"] as? Int == 45 && read.json["dailyQuota"] is NSNull)

            // Another project's token is 404, no token 401, the ingest key is no read token.
            #expect(try await client.query(uri, token: other.readToken).status == .notFound)
            #expect(try await client.query(uri, token: other.readToken, method: .patch, body: "{}").status == .notFound)
            #expect(try await client.query(uri, token: nil).status == .unauthorized)
            #expect(try await client.query(uri, token: p.ingestKey, method: .patch, body: "{}").status == .unauthorized)
        }
    }

    @Test("a PATCH with one bad field is a 400 naming it, and changes nothing")
    func refusals() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let uri = "/v1/projects/\(p.project)/settings"
            let cases: [(body: String, field: String)] = [
                (#"{"scrubIPs": true, "colour": "red"}"#, "colour"),
                (#"{"scrubIPs": true, "quotaUsedToday": 0}"#, "quotaUsedToday"),
                (#"{"scrubIPs": 1}"#, "scrubIPs"),
                (#"{"scrubIPs": true, "retentionDays": 6}"#, "retentionDays"),
                (#"{"scrubIPs": true, "retentionDays": 366}"#, "retentionDays"),
                (#"{"scrubIPs": true, "retentionDays": 7.5}"#, "retentionDays"),
                (#"{"scrubIPs": true, "dailyQuota": -1}"#, "dailyQuota"),
                (#"{"scrubIPs": true, "dailyQuota": 2147483648}"#, "dailyQuota"),
                (#"{"scrubIPs": true, "scrubDefaults": null}"#, "scrubDefaults"),
                (#"{"scrubIPs": true, "safeFields": [""]}"#, "safeFields"),
                (#"{"scrubIPs": true, "safeFields": "x"}"#, "safeFields"),
                (#"{"scrubIPs": true, "sensitiveFields": [1]}"#, "sensitiveFields"),
                (#"{"scrubIPs": true, "sensitiveFields": ["\#(String(repeating: "k", count: 65))"]}"#, "sensitiveFields"),
                (#"{"scrubIPs": true, "patterns": ["(unclosed"]}"#, "patterns"),
                (#"{"scrubIPs": true, "patterns": ["(a)\\1"]}"#, "patterns"),
                (#"{"scrubIPs": true, "patterns": ["\#(String(repeating: "a", count: 257))"]}"#, "patterns"),
                (#"{"scrubIPs": true, "patterns": [\#((0..<21).map { "\"p\($0)\"" }.joined(separator: ","))]}"#, "patterns"),
                (#"[1]"#, "body"),
                (#"{"scrubIPs": tru"#, "body"),
            ]
            for (body, field) in cases {
                let answer = try await client.query(uri, token: p.readToken, method: .patch, body: body)
                #expect(answer.status == .badRequest, "\(body)")
                #expect(answer.json.error.hasPrefix(field), "\(body): \(answer.json.error)")
            }
            let read = try await client.query(uri, token: p.readToken)
            #expect(read.json["scrubIPs"] as? Bool == false, "a refused PATCH changed nothing")
            // 50 fields of 64 bytes and 20 patterns of 256 bytes are within the limits.
            let fields = (0..<50).map { "\"\(String(repeating: "f", count: 62))\($0 % 10)\($0 / 10)\"" }.joined(separator: ",")
            let patterns = (0..<20).map { "\"\(String(repeating: "a", count: 254))\($0 % 10)\($0 / 10)\"" }
                .joined(separator: ",")
            let full = try await client.query(
                uri, token: p.readToken, method: .patch, body: #"{"safeFields": [\#(fields)], "patterns": [\#(patterns)]}"#)
            #expect(full.status == .ok, "\(full.json.error)")
        }
    }

    @Test("another server sees a change once its cached copy is a second old; the answering one at once")
    func replicas() async throws {
        let p = try await makeProject()
        try await withTestDatabase { db in
            let id = try await db.projectID(slug: p.project)
            let store = PostgresProjectSettingsStore(database: db)
            let clock = TestInstant()
            let here = ProjectSettingsCache(store: store, logger: TestEnvironment.logger, now: { clock.now })
            let there = ProjectSettingsCache(store: store, logger: TestEnvironment.logger, now: { clock.now })
            #expect(try await there.settings(project: id).scrubEmails == false)
            let updated = try await store.update(project: id) { try $0.patched(with: Array(#"{"scrubEmails": true}"#.utf8)) }
            here.replace(project: id, with: updated)
            #expect(try await here.scrubber(project: id).settings.scrubEmails == true)
            #expect(try await there.settings(project: id).scrubEmails == false, "still fresh in its cache")
            clock.advance(.milliseconds(1001))
            #expect(try await there.settings(project: id).scrubEmails == true)
            #expect(try await there.scrubber(project: id).scrub(text: "mail ana@example.com") == "mail [email]")
        }
    }
}

/// A clock the test moves by hand.
final class TestInstant: Sendable {
    private let instant = Mutex(ContinuousClock.now)
    var now: ContinuousClock.Instant { instant.withLock { $0 } }
    func advance(_ by: Duration) { instant.withLock { $0 += by } }
}

extension CrashDatabase {
    /// The database id of a project.
    func projectID(slug: String) async throws -> Int64 {
        let rows = try await client.query("SELECT id FROM projects WHERE slug = \(slug)", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw NoSuchProject(slug: slug)
    }
}

struct NoSuchProject: Error {
    var slug: String
}
