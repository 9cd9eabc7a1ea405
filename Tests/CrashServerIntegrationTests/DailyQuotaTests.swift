import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// data-protection.md, "Daily quota": counted exactly in the database across servers, all or
/// nothing per request, duplicates always fit, `Retry-After` to midnight at most, Sentry's
/// rate-limit header, and sessions kept when an envelope's event is dropped.
@Suite("Daily quota")
struct DailyQuotaTests {
    /// Sets the project's settings as a `PATCH` would, before any server caches them.
    static func set(_ p: ProjectCredentials, _ patch: String) async throws {
        try await withTestDatabase { db in
            let id = try await db.projectID(slug: p.project)
            _ = try await PostgresProjectSettingsStore(database: db).update(project: id) { try $0.patched(with: Array(patch.utf8)) }
        }
    }

    static func reports(_ n: Int, ids: [UUID]? = nil) -> [UInt8] {
        batchBody((ids ?? (0..<n).map { _ in UUID() }).map { reportJSON(id: $0) })
    }

    /// `Retry-After` as sent, checked against the contract's bounds at the time of the answer.
    static func expectRetryAfter(_ response: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) -> Int? {
        let seconds = response.headers[.retryAfter].flatMap { Int($0) }
        let most = QuotaExceeded.secondsToMidnight(after: Date())
        #expect(seconds.map { $0 >= 1 && $0 <= most + 1 } == true, "Retry-After \(String(describing: seconds))", sourceLocation: sourceLocation)
        return seconds
    }

    @Test("two servers on one database share one quota: exactly the requests that fit are stored")
    func twoReplicas() async throws {
        let p = try await makeProject()
        try await Self.set(p, #"{"dailyQuota": 10}"#)
        try await withApp { a in
            try await withApp { b in
                // 8 requests of 2 new reports each, 4 through each server at once: 5 fit.
                let answers = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                    for i in 0..<8 {
                        let client = i % 2 == 0 ? a : b
                        group.addTask { try await client.ingest(key: p.ingestKey, body: Self.reports(2)) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(answers.count { $0.status == .accepted } == 5)
                let refused = answers.filter { $0.status == .tooManyRequests }
                #expect(refused.count == 3)
                for answer in refused {
                    _ = Self.expectRetryAfter(answer)
                    let body = try answer.json()
                    #expect(body["quotaRemaining"] as? Int == 0)
                    #expect((body["error"] as? String)?.contains("quota") == true)
                }
                let settings = try await b.query("/v1/projects/\(p.project)/settings", token: p.readToken)
                #expect(settings.json["quotaUsedToday"] as? Int == 10)
            }
        }
        try await withTestDatabase { db throws in
            #expect(try await db.storedReportIDs(slug: p.project).count == 10)
            #expect(try await db.rollupTotal(slug: p.project) == 10)
        }
    }

    @Test("all or nothing: a request that does not fit stores nothing; duplicates always fit; lowering below the count refuses")
    func allOrNothing() async throws {
        let p = try await makeProject()
        try await Self.set(p, #"{"dailyQuota": 5}"#)
        try await withApp { client in
            let first = (0..<3).map { _ in UUID() }
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(3, ids: first)).status == .accepted)
            // 3 new do not fit in the 2 left: nothing of them is stored.
            let over = try await client.ingest(key: p.ingestKey, body: Self.reports(3))
            #expect(over.status == .tooManyRequests)
            #expect(try over.json()["quotaRemaining"] as? Int == 2)
            _ = Self.expectRetryAfter(over)
            // A retry of stored reports always fits; a rejected report does not count.
            let retry = try await client.ingest(key: p.ingestKey, body: Self.reports(3, ids: first))
            #expect(retry.status == .accepted)
            #expect(try retry.decode(IngestResponse.self).duplicates == 3)
            var invalid = reportJSON()
            invalid["reason"] = ""
            let mixed = batchBody([reportJSON(id: first[0]), reportJSON(), reportJSON(), invalid])
            let fits = try await client.ingest(key: p.ingestKey, body: mixed)
            #expect(fits.status == .accepted)
            let outcome = try fits.decode(IngestResponse.self)
            #expect(outcome.accepted == 2 && outcome.duplicates == 1 && outcome.rejected.count == 1)
            // The day is full: one more is refused, duplicates still fit.
            let full = try await client.ingest(key: p.ingestKey, body: Self.reports(1))
            #expect(try full.status == .tooManyRequests && full.json()["quotaRemaining"] as? Int == 0)
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(1, ids: [first[1]])).status == .accepted)
            // Lowering the quota below what is used refuses every new report; raising it lets them in.
            let uri = "/v1/projects/\(p.project)/settings"
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"dailyQuota": 2}"#).status == .ok)
            let below = try await client.ingest(key: p.ingestKey, body: Self.reports(1))
            #expect(try below.status == .tooManyRequests && below.json()["quotaRemaining"] as? Int == 0)
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 5)
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"dailyQuota": 6}"#).status == .ok)
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(1)).status == .accepted)
            // No quota: nothing refused, and the day's count goes on.
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"dailyQuota": null}"#).status == .ok)
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(4)).status == .accepted)
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 10)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(buffer: metrics.body)
            #expect(text.contains(#"crashguard_quota_refusals_total{door="reports"}"#))
        }
        try await withTestDatabase { db throws in
            #expect(try await db.storedReportIDs(slug: p.project).count == 10)
        }
    }

    @Test("a quota set during the day counts the reports already received that day")
    func setDuringTheDay() async throws {
        let p = try await makeProject()
        try await withApp { client in
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(3)).status == .accepted)
            let uri = "/v1/projects/\(p.project)/settings"
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 3)
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"dailyQuota": 4}"#).status == .ok)
            let over = try await client.ingest(key: p.ingestKey, body: Self.reports(2))
            #expect(try over.status == .tooManyRequests && over.json()["quotaRemaining"] as? Int == 1)
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(1)).status == .accepted)
        }
    }

    @Test("the Apple door: all or nothing under the quota, duplicates fit; its 429 and /v1/reports' match the OpenAPI document")
    func appleDoorAndDocument() async throws {
        let p = try await makeProject()
        try await Self.set(p, #"{"dailyQuota": 2}"#)
        let doc = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        let validator = SchemaValidator(document: doc)
        // The document declares the quota's answer: quotaRemaining and Retry-After on both doors.
        let schemas = (doc["components"] as? [String: Any])?["schemas"] as? [String: Any]
        let refusal = try #require(schemas?["TooManyRequests"] as? [String: Any])
        #expect((refusal["properties"] as? [String: Any])?["quotaRemaining"] != nil)
        for path in ["/v1/reports", "/v1/apple/reports"] {
            let declared = ((doc["paths"] as? [String: Any])?[path] as? [String: Any])?["post"] as? [String: Any]
            let answer = (declared?["responses"] as? [String: Any])?["429"] as? [String: Any]
            #expect((answer?["description"] as? String)?.contains("quota") == true, "\(path)")
            #expect((answer?["headers"] as? [String: Any])?["Retry-After"] != nil, "\(path)")
        }
        let (header, body) = try AppleIngestTests.ipsParts("crash-segv.ips")
        func ips(_ id: UUID) -> [UInt8] {
            var (h, b) = (header, body)
            h["incident_id"] = id.uuidString
            b["incident"] = id.uuidString
            return AppleIngestTests.ips(h, b)
        }
        let (first, second, third) = (ips(UUID()), ips(UUID()), ips(UUID()))
        try await withApp { client in
            #expect(try await AppleIngestTests.post(client, key: p.ingestKey, body: first).status == .accepted)
            #expect(try await AppleIngestTests.post(client, key: p.ingestKey, body: second).status == .accepted)
            let over = try await AppleIngestTests.post(client, key: p.ingestKey, body: third)
            try validator.check(over, path: "/v1/apple/reports", method: "post", status: "429")
            #expect(try over.json()["quotaRemaining"] as? Int == 0)
            #expect(try (over.json()["error"] as? String)?.contains("quota") == true)
            _ = Self.expectRetryAfter(over)
            // A resend of a stored report is a duplicate, which always fits.
            let again = try await AppleIngestTests.post(client, key: p.ingestKey, body: first)
            #expect(again.status == .accepted)
            #expect(try AppleIngestTests.counts(again) == IngestResponse(accepted: 0, duplicates: 1, rejected: []))
            let reports = try await client.ingest(key: p.ingestKey, body: Self.reports(1))
            try validator.check(reports, path: "/v1/reports", method: "post", status: "429")
            let settings = try await client.query("/v1/projects/\(p.project)/settings", token: p.readToken)
            #expect(settings.json["quotaUsedToday"] as? Int == 2)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"crashguard_quota_refusals_total{door="apple"}"#))
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: p.project).count } == 2)
    }

    @Test("quotaUsedToday is the day's counter in project_quota_days: reports erased today still count")
    func usedTodayCountsErasedReports() async throws {
        let p = try await makeProject()
        try await Self.set(p, #"{"dailyQuota": 100}"#)
        let uri = "/v1/projects/\(p.project)/settings"
        try await withApp { client in
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(3)).status == .accepted)
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 3)
            let erase = try await client.query("/v1/projects/\(p.project)/devices/device-1", token: p.readToken, method: .delete)
            #expect(erase.status == .accepted)
        }
        try await ErasureTests.drain()
        try await withApp { client in
            #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: p.project).isEmpty })
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 3, "erased today, still counted")
            // And the quota still holds them: 97 more fit today, not 100.
            let over = try await client.ingest(key: p.ingestKey, body: Self.reports(98))
            #expect(try over.status == .tooManyRequests && over.json()["quotaRemaining"] as? Int == 97)
        }
    }

    @Test("without a quota (no counter row) reports erased today still count, and a quota set later counts them")
    func usedTodayCountsErasedReportsWithoutAQuota() async throws {
        let p = try await makeProject()
        let uri = "/v1/projects/\(p.project)/settings"
        try await withApp { client in
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(3)).status == .accepted)
            let erase = try await client.query("/v1/projects/\(p.project)/devices/device-1", token: p.readToken, method: .delete)
            #expect(erase.status == .accepted)
        }
        try await ErasureTests.drain()
        try await withApp { client in
            try await withTestDatabase { db throws in
                #expect(try await db.storedReportIDs(slug: p.project).isEmpty)
                let rows = try await db.client.query(
                    "SELECT count(*) FROM project_quota_days WHERE project_id = \(try await db.projectID(slug: p.project))",
                    logger: TestEnvironment.logger)
                for try await n in rows.decode(Int64.self) { #expect(n == 0, "no quota, no counter row") }
            }
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 3, "erased today, still counted")
            #expect(try await client.ingest(key: p.ingestKey, body: Self.reports(2)).status == .accepted)
            #expect(try await client.query(uri, token: p.readToken).json["quotaUsedToday"] as? Int == 5)
            // A quota set now starts its counter from the day's reports, erased ones included.
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"dailyQuota": 6}"#).status == .ok)
            let over = try await client.ingest(key: p.ingestKey, body: Self.reports(2))
            #expect(try over.status == .tooManyRequests && over.json()["quotaRemaining"] as? Int == 1)
        }
    }

    @Test("the Sentry door: 429 with Retry-After and X-Sentry-Rate-Limits; an envelope's sessions are kept and its event dropped")
    func sentryDoor() async throws {
        let p = try await makeProject()
        try await Self.set(p, #"{"dailyQuota": 1}"#)
        try await withApp { client in
            let auth = SentryIngestTests.auth(p.ingestKey)
            let envelope = "/api/\(p.sentryId)/envelope/"
            let event = SentryIngestTests.eventEnvelope(SentryIngestTests.event())
            #expect(try await client.sentry(envelope, headers: auth, body: event).status == .ok)
            // The same event again is a duplicate: it fits.
            #expect(try await client.sentry(envelope, headers: auth, body: event).status == .ok)
            let over = try await client.sentry(envelope, headers: auth, body: SentryIngestTests.eventEnvelope(SentryIngestTests.event()))
            #expect(over.status == .tooManyRequests)
            let seconds = Self.expectRetryAfter(over)
            #expect(over.headers[SentryController.rateLimitsHeader] == "\(seconds ?? -1):error:project:quota_exceeded")
            let store = try await client.sentry(
                "/api/\(p.sentryId)/store/", headers: auth, body: SentryIngestTests.json(SentryIngestTests.event()))
            #expect(store.status == .tooManyRequests)
            #expect(store.headers[SentryController.rateLimitsHeader]?.hasSuffix(":error:project:quota_exceeded") == true)
            // An event with a session: the session is stored, the event dropped, 200 with the header.
            let sid = UUID()
            let session: [String: Any] = [
                "sid": sid.uuidString.lowercased(), "started": RFC3339.format(Date()), "status": "ok", "seq": 1,
                "attrs": ["release": "com.example.api@2.1.0"],
            ]
            let both = SentryIngestTests.envelope(
                items: [("event", SentryIngestTests.json(SentryIngestTests.event())), ("session", SentryIngestTests.json(session))])
            let kept = try await client.sentry(envelope, headers: auth, body: both)
            #expect(kept.status == .ok)
            #expect(kept.headers[SentryController.rateLimitsHeader]?.hasSuffix(":error:project:quota_exceeded") == true)
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"crashguard_quota_refusals_total{door="sentry"}"#))
            try await withTestDatabase { db in
                let rows = try await db.client.query(
                    "SELECT count(*)::bigint FROM session_states WHERE sid = \(sid)", logger: TestEnvironment.logger)
                for try await n in rows.decode(Int64.self) { #expect(n == 1) }
                #expect(try await db.storedReportIDs(slug: p.project).count == 1)
            }
        }
    }
}
