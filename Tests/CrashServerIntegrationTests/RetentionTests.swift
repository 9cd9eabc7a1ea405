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
            // Swept for this project alone: other tests' projects in the shared database have
            // reports of their own past their retention at these times.
            let id = try await db.projectID(slug: p.project)
            // The 20-, 12- and 10-day-old reports are past 7 days; the hour-old one stays.
            #expect(try await sweeper.runOnce(now: now, project: id) == 3)
            #expect(try await db.storedReportIDs(slug: p.project).count == 1)
            let groups = try await db.groups(slug: p.project)
            #expect(groups.count == 1, "the group whose reports were all past retention is gone")
            #expect(groups.first?.count == 1)
            #expect(try await db.rollupTotal(slug: p.project) == 1)
            try await RollupEquivalenceTests.expectRollupsMatch(slug: p.project)
            // Nothing more to remove.
            #expect(try await sweeper.runOnce(now: now, project: id) == 0)
            // Seven days later the hour-old report is past retention too: the group's last
            // report goes, and the group with it.
            #expect(try await sweeper.runOnce(now: now.addingTimeInterval(7 * Self.day), project: id) == 1)
            #expect(try await db.storedReportIDs(slug: p.project).isEmpty)
            #expect(try await db.groups(slug: p.project).isEmpty)
            #expect(try await db.rollupTotal(slug: p.project) == 0)
        }
    }

    @Test("a lowered retention hides older reports from every query at once, before any sweep")
    func queriesClampedToRetention() async throws {
        let p = try await makeProject()
        let now = Date()
        let (gone, kept) = ("retention gone alpha", "retention kept beta")
        try await withApp { client throws in
            let body = batchBody([
                reportJSON(timestamp: now.addingTimeInterval(-10 * Self.day), reason: gone, version: "1.0.0"),
                reportJSON(timestamp: now.addingTimeInterval(-9 * Self.day), reason: gone, version: "1.0.0"),
                reportJSON(timestamp: now.addingTimeInterval(-10 * Self.day), reason: kept, version: "1.0.0"),
                reportJSON(timestamp: now.addingTimeInterval(-3600), reason: kept, version: "2.0.0"),
            ])
            #expect(try await client.ingest(key: p.ingestKey, body: body).decode(IngestResponse.self).accepted == 4)
            let base = "/v1/projects/\(p.project)"
            let from = RFC3339.format(now.addingTimeInterval(-30 * Self.day))
            func list() async throws -> [[String: Any]] {
                try await client.query("\(base)/crashes?from=\(from)", token: p.readToken).json["groups"] as? [[String: Any]] ?? []
            }
            let before = try await list()
            #expect(before.count == 2)
            let goneID = try #require(before.first { $0["title"] as? String == gone }?["id"] as? String)
            let keptID = try #require(before.first { $0["title"] as? String == kept }?["id"] as? String)

            // No sweeper runs in tests (CRASHGUARD_RETENTION_INTERVAL=0): what follows is the queries' own doing.
            #expect(try await client.query("\(base)/settings", token: p.readToken, method: .patch, body: #"{"retentionDays": 7}"#).status == .ok)
            let after = try await list()
            #expect(after.map { $0["id"] as? String } == [keptID], "the group with only old reports is gone from the list")
            #expect(after.first?["count"] as? Int == 1)
            #expect(after.first?["versions"] as? [String] == ["2.0.0"], "a version seen only past retention is not listed")
            let firstSeen = try #require((after.first?["firstSeen"] as? String).flatMap { RFC3339.parse($0) })
            #expect(firstSeen > now.addingTimeInterval(-7 * Self.day), "firstSeen is the oldest report kept")
            for sort in ["lastSeen", "firstSeen"] {
                let sorted = try await client.query("\(base)/crashes?from=\(from)&sort=\(sort)", token: p.readToken)
                #expect((sorted.json["groups"] as? [[String: Any]])?.map { $0["id"] as? String } == [keptID], "sort=\(sort)")
            }

            #expect(try await client.query("\(base)/crashes/\(goneID)?from=\(from)", token: p.readToken).status == .notFound)
            #expect(try await client.query("\(base)/crashes/\(goneID)/reports", token: p.readToken).status == .notFound)
            let detail = try await client.query("\(base)/crashes/\(keptID)?from=\(from)", token: p.readToken)
            #expect(detail.status == .ok)
            #expect(((detail.json["group"] as? [String: Any]) ?? detail.json)["count"] as? Int == 1)
            #expect((detail.json["latest"] as? [[String: Any]])?.count == 1)
            let histogram = detail.json["histogram"] as? [[String: Any]] ?? []
            #expect(histogram.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == 1)
            let reports = try await client.query("\(base)/crashes/\(keptID)/reports", token: p.readToken)
            #expect((reports.json["reports"] as? [[String: Any]])?.count == 1)
            #expect(reports.json["nextCursor"] == nil || reports.json["nextCursor"] is NSNull)

            let stats = try await client.query("\(base)/stats?from=\(from)&interval=day", token: p.readToken)
            let points = (stats.json["series"] as? [[String: Any]])?.first?["points"] as? [[String: Any]] ?? []
            #expect(points.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == 1)
            #expect(points.count == 31, "the buckets asked for, zero before the cut-off")

            let release = try await client.query("\(base)/releases/1.0.0?from=\(from)", token: p.readToken)
            #expect((release.json["topGroups"] as? [[String: Any]])?.isEmpty == true)
            #expect((release.json["newGroups"] as? [[String: Any]])?.isEmpty == true)
        }
        // The terminal's table (and so the dashboard's list, the same service) leaves the group out too.
        try await withTestDatabase { db in
            var table = TopCrashesTable()
            table.window = "30d"
            let text = try await table.render(database: db, project: p.project)
            #expect(text.contains(kept.prefix(20)) && !text.contains(gone.prefix(20)), "\(text)")
            #expect(try await db.storedReportIDs(slug: p.project).count == 4, "nothing was erased: the queries hid them")
        }
    }

    @Test("under environment=, firstSeen and lastSeen, and the environments listed, are those of the reports kept")
    func environmentsClampedToRetention() async throws {
        let p = try await makeProject(), fresh = try await makeProject()
        let now = Date()
        func report(_ days: Double, _ environment: String) -> [String: Any] {
            reportJSON(
                timestamp: now.addingTimeInterval(-days * Self.day), reason: "retention environments delta",
                extra: ["environment": environment])
        }
        // Staging's oldest report is past the cut-off and its oldest kept one is younger than
        // production's; canary has only reports past the cut-off. `fresh` gets only those kept.
        let kept = [report(5, "production"), report(3, "staging"), report(1, "production")]
        let old = [report(10, "staging"), report(12, "canary")]
        let (all, keptOnly) = (batchBody(old + kept), batchBody(kept))
        try await withApp { client throws in
            #expect(try await client.ingest(key: p.ingestKey, body: all).decode(IngestResponse.self).accepted == 5)
            #expect(try await client.ingest(key: fresh.ingestKey, body: keptOnly).decode(IngestResponse.self).accepted == 3)
        }
        for project in [p, fresh] { try await DailyQuotaTests.set(project, #"{"retentionDays": 7}"#) }
        let from = RFC3339.format(now.addingTimeInterval(-30 * Self.day))
        try await withApp { client throws in
            // The list and the detail under each environment, as the project that never got the
            // old reports answers them.
            func answers(_ x: ProjectCredentials) async throws -> [String] {
                let base = "/v1/projects/\(x.project)"
                let all = try await client.query("\(base)/crashes?from=\(from)", token: x.readToken).json.groups
                let id = try #require(all.first?["id"] as? String)
                var out: [String] = []
                for environment in ["staging", "production", "canary"] {
                    let list = try await client.query("\(base)/crashes?from=\(from)&environment=\(environment)", token: x.readToken)
                    out.append(ErasureTests.canonical(list.json.groups.map { $0.filter { $0.key != "id" } }))
                    let detail = try await client.query("\(base)/crashes/\(id)?from=\(from)&environment=\(environment)", token: x.readToken)
                    let group = (detail.json["group"] as? [String: Any]) ?? detail.json
                    out.append("\(detail.status.code) " + ErasureTests.canonical(["firstSeen", "lastSeen", "count"].map { group[$0] ?? NSNull() }))
                }
                return out
            }
            let (mine, theirs) = (try await answers(p), try await answers(fresh))
            #expect(mine == theirs)
            #expect(mine.first?.contains(RFC3339.format(now.addingTimeInterval(-3 * Self.day))) == true, "\(mine)")
        }
        try await withTestDatabase { db in
            let queries = QueryService(store: PostgresQueryStore(database: db))
            let project = try #require(try await PostgresProjectStore(database: db).project(slug: p.project))
            #expect(try await queries.environments(project) == ["production", "staging"])
        }
    }

    @Test("the sweeper erases exactly what the queries hide: one cut-off, the start of the hour that holds it")
    func oneCutOff() async throws {
        let p = try await makeProject()
        // A sweep half an hour into the current hour: its cut-off is half an hour into the hour
        // seven days back. `inHour` lies in that hour before the exact cut-off, `past` before the hour.
        let at = TimeWindow.floor(Date(), TimeWindow.hour).addingTimeInterval(1800)
        let hour = at.addingTimeInterval(-7 * Self.day - 1800)
        let (inHour, past) = ("retention in the hour", "retention before the hour")
        try await withApp { client throws in
            let body = batchBody([
                reportJSON(timestamp: hour.addingTimeInterval(900), reason: inHour),
                reportJSON(timestamp: hour.addingTimeInterval(-900), reason: past),
            ])
            #expect(try await client.ingest(key: p.ingestKey, body: body).decode(IngestResponse.self).accepted == 2)
        }
        try await DailyQuotaTests.set(p, #"{"retentionDays": 7}"#)
        try await withTestDatabase { db in
            let id = try await db.projectID(slug: p.project)
            let queries = QueryService(store: PostgresQueryStore(database: db), now: { at })
            let project = try #require(try await PostgresProjectStore(database: db).project(slug: p.project))
            let request = GroupListRequest(window: TimeWindow(from: at.addingTimeInterval(-30 * Self.day), to: at))
            let shown = try await queries.groups(project, request).groups.map(\.title)
            #expect(shown == [inHour])
            let sweeper = RetentionSweeper(database: db, serverRetentionDays: 90, interval: .seconds(3600), logger: TestEnvironment.logger)
            #expect(try await sweeper.runOnce(now: at, project: id) == 1, "only the report before the cut-off's hour")
            #expect(try await db.groups(slug: p.project).map(\.title) == [inHour])
            #expect(try await queries.groups(project, request).groups.map(\.title) == shown, "stored is what the queries showed")
            try await RollupEquivalenceTests.expectRollupsMatch(slug: p.project)
        }
    }
}
