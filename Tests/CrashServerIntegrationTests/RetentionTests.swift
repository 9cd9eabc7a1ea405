import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// data-protection.md, "Retention": reports older than the project's `retentionDays` are
/// refused on arrival (or take the receive time through the Sentry door), and the sweeper
/// removes stored ones with their share of every rollup, groups left empty included.
@Suite("Retention")
struct RetentionTests {
    static let day: Double = 86_400

    @Test("/v1/reports rejects a report older than the retention, naming timestamp; the Sentry door takes the receive time")
    func arrival() async throws {
        let p = try await makeProject()
        try await DailyQuotaTests.set(p, #"{"retentionDays": 7}"#)
        let now = Date()
        try await withApp { client in
            let body = batchBody([
                reportJSON(timestamp: now.addingTimeInterval(-8 * Self.day)),
                reportJSON(timestamp: now.addingTimeInterval(-6 * Self.day)),
                reportJSON(timestamp: now.addingTimeInterval(-31 * Self.day)),
            ])
            let answer = try await client.ingest(key: p.ingestKey, body: body)
            #expect(answer.status == .accepted)
            let outcome = try answer.decode(IngestResponse.self)
            #expect(outcome.accepted == 1)
            #expect(outcome.rejected.map(\.index) == [0, 2])
            #expect(outcome.rejected.allSatisfy { $0.error.hasPrefix("timestamp:") }, "\(outcome.rejected)")
            #expect(outcome.rejected.first?.error.contains("retention of 7 days") == true)

            var event = SentryIngestTests.event()
            event["timestamp"] = now.addingTimeInterval(-8 * Self.day).timeIntervalSince1970
            let sent = try await client.sentry(
                "/api/\(p.sentryId)/envelope/", headers: SentryIngestTests.auth(p.ingestKey),
                body: SentryIngestTests.eventEnvelope(event))
            #expect(sent.status == .ok)
        }
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                "SELECT min(r.ts) FROM reports r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(p.project)",
                logger: TestEnvironment.logger)
            for try await oldest in rows.decode(Date.self) {
                #expect(oldest >= now.addingTimeInterval(-6 * Self.day - 1), "the Sentry event took its receive time")
            }
            #expect(try await db.storedReportIDs(slug: p.project).count == 2)
        }
    }

    @Test("the sweeper removes reports past retention with their rollups; a group left empty disappears")
    func sweeper() async throws {
        let p = try await makeProject()
        let now = Date()
        let old = "retention old \(UUID())"
        let mixed = "retention mixed \(UUID())"
        try await withApp { client throws in
            let body = batchBody([
                reportJSON(timestamp: now.addingTimeInterval(-20 * Self.day), reason: old),
                reportJSON(timestamp: now.addingTimeInterval(-12 * Self.day), reason: old),
                reportJSON(timestamp: now.addingTimeInterval(-10 * Self.day), reason: mixed),
                reportJSON(timestamp: now.addingTimeInterval(-3600), reason: mixed, version: "2.0.0"),
            ])
            #expect(try await client.ingest(key: p.ingestKey, body: body).decode(IngestResponse.self).accepted == 4)
            let uri = "/v1/projects/\(p.project)/settings"
            #expect(try await client.query(uri, token: p.readToken, method: .patch, body: #"{"retentionDays": 7}"#).status == .ok)
        }
        try await withTestDatabase { db in
            let sweeper = RetentionSweeper(
                database: db, serverRetentionDays: 90, interval: .seconds(3600), logger: TestEnvironment.logger)
            // The 20-, 12- and 10-day-old reports are past 7 days; the hour-old one stays.
            #expect(try await sweeper.runOnce(now: now) == 3)
            #expect(try await db.storedReportIDs(slug: p.project).count == 1)
            let groups = try await db.groups(slug: p.project)
            #expect(groups.count == 1, "the group whose reports were all past retention is gone")
            #expect(groups.first?.count == 1)
            #expect(try await db.rollupTotal(slug: p.project) == 1)
            try await RollupEquivalenceTests.expectRollupsMatch(slug: p.project)
            // Nothing more to remove.
            #expect(try await sweeper.runOnce(now: now) == 0)
        }
    }
}
