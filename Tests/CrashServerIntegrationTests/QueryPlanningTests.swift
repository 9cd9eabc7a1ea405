import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// What the query API's reads cost PostgreSQL besides running them: the planning of a window
/// count and the start of parallel workers (docs/performance.md, "Release health").
@Suite struct QueryPlanningTests {
    /// A read snapshot's session starts no parallel workers: a release page's exact device
    /// counts (a few hundred reports by group) were planned with two, whose start took 5 to
    /// 25 ms on the loaded benchmark machine against 2 ms for the read itself.
    @Test func readSnapshotsRunWithoutParallelWorkers() async throws {
        try await withTestDatabase { db in
            let setting = try await db.withReadSnapshot { connection in
                let rows = try await connection.query("SHOW max_parallel_workers_per_gather", logger: TestEnvironment.logger)
                var value = ""
                for try await text in rows.decode(String.self) { value = text }
                return value
            }
            #expect(setting == "0")
        }
    }

    /// A window count plans only the reads its window needs: a release page's count over whole
    /// days of one version reads the per-version rollups, not the reports' partitions (whose
    /// planning, 2.5 ms a count, was most of its cost), and a sub-hour edge, the aggregator's
    /// pending batches and a cursor's snapshot each add the read of reports they need.
    @Test func aWindowCountStatementHoldsOnlyTheReadsItsWindowNeeds() {
        let days = TimeWindow(from: date("2026-10-30T00:00:00Z"), to: date("2026-11-29T00:00:00Z"))
        let version = GroupFilters(version: "3.1.4")
        func sql(_ window: TimeWindow, _ filters: GroupFilters, pending: Bool = false, snapshot: String? = nil) -> String {
            let reads = WindowCountReads(
                project: 1, members: [7, 8], window: window, filters: filters, pending: pending, snapshot: snapshot)
            let query: PostgresQuery = "\(windowCountRows: reads)"
            return query.sql
        }

        let wholeDays = sql(days, version)
        #expect(wholeDays.contains("group_version_daily"))
        #expect(!wholeDays.contains("group_version_hourly"), "no edge hours: \(wholeDays)")
        #expect(!wholeDays.contains("reports"), "no sub-hour edge, nothing pending, no snapshot: \(wholeDays)")

        let edges = sql(TimeWindow(from: date("2026-10-30T00:20:00Z"), to: date("2026-11-29T05:30:00Z")), version)
        #expect(edges.contains("group_version_hourly"))
        #expect(edges.contains("FROM reports"), "sub-hour edges: \(edges)")
        #expect(!edges.contains("rollup_pending"))

        #expect(sql(days, version, pending: true).contains("rollup_pending"))
        #expect(sql(days, version, snapshot: "10:20:").contains("pg_visible_in_snapshot"))

        let app = sql(days, GroupFilters(app: "com.example"))
        #expect(app.contains("group_daily") && !app.contains("group_version"), "an app filter reads group_daily: \(app)")
        #expect(!app.contains("group_hourly") && !app.contains("reports"), "\(app)")
    }

    /// A window count reads only the pending batches' reports, found by `(project_id, xact)`,
    /// however many reports the project has. With the pending transactions as a subquery joined
    /// on its expression, PostgreSQL hashed them and read every report of the project in the
    /// window (seen at 124,000 reports: 943 ms a count; 0.9 ms by `(project_id, xact)`). At this
    /// test's size the planner may take either plan for that form: this guards the array form.
    @Test func thePendingScanReadsOnlyThePendingBatchesReports() async throws {
        let credentials = try await makeProject()
        let now = Date()
        @Sendable func batch(_ n: Int) -> [UInt8] {
            batchBody((0..<n).map { i in reportJSON(timestamp: now.addingTimeInterval(-Double(i % 600)), version: "1.\(i % 7)") })
        }
        try await withApp { client in
            for _ in 0..<2 {
                let status = try await client.ingest(key: credentials.ingestKey, body: batch(1000)).status
                #expect(status == .accepted)
            }
        }
        try await withTestDatabase { db in
            try await db.aggregateRollups()
            let project = try #require(try await PostgresProjectStore(database: db).project(readToken: credentials.readToken)).id
            // One batch of 3 reports the aggregator has not folded: the lock is held while it commits.
            try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                try await PostgresRollupStore.lock(connection, logger: TestEnvironment.logger)
                try await withApp { client in
                    let status = try await client.ingest(key: credentials.ingestKey, body: batch(3)).status
                    #expect(status == .accepted)
                }
                try await connection.query("ANALYZE reports", logger: TestEnvironment.logger)
                let days = TimeWindow(from: TimeWindow.floor(now, TimeWindow.day) - 30 * 86_400, to: TimeWindow.floor(now, TimeWindow.day) + 86_400)
                let reads = WindowCountReads(project: project, members: nil, window: days, filters: GroupFilters(), pending: true, snapshot: nil)
                let plan = try await connection.query(
                    "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM (\(windowCountRows: reads)) x", logger: TestEnvironment.logger)
                var text = ""
                for try await json in plan.decode(String.self) { text += json }
                let read = Self.rowsRead(fromReports: try JSONSerialization.jsonObject(with: Data(text.utf8)))
                // 3 pending reports, plus the few rows of other projects' small partitions a
                // sequential scan passes over; a scan of the project's reports reads its 2,003.
                #expect(read < 1000, "reports read by the pending scan: \(read)")
            }
        }
    }

    /// Rows the plan's scans of `reports` partitions returned or filtered out, all loops.
    private static func rowsRead(fromReports node: Any) -> Int {
        if let list = node as? [Any] { return list.reduce(0) { $0 + rowsRead(fromReports: $1) } }
        guard let object = node as? [String: Any] else { return 0 }
        var total = 0
        if let relation = object["Relation Name"] as? String, relation.hasPrefix("reports") {
            let loops = object["Actual Loops"] as? Int ?? 1
            total += ((object["Actual Rows"] as? Int ?? 0) + (object["Rows Removed by Filter"] as? Int ?? 0)) * loops
        }
        for key in ["Plan", "Plans"] { if let child = object[key] { total += rowsRead(fromReports: child) } }
        return total
    }

    /// A count over an empty window or no groups reads nothing and counts nothing.
    @Test func anEmptyWindowCountsNothing() async throws {
        try await withTestDatabase { db in
            let instant = date("2026-11-01T00:00:00Z")
            let counts = try await PostgresQueryStore(database: db).read { reader in
                (
                    try await reader.windowCounts(
                        project: 1, ids: nil, window: TimeWindow(from: instant, to: instant), filters: GroupFilters(), snapshot: nil),
                    try await reader.windowCounts(
                        project: 1, ids: [], window: TimeWindow(from: instant, to: instant.addingTimeInterval(86_400)),
                        filters: GroupFilters(), snapshot: nil)
                )
            }
            #expect(counts.0.isEmpty && counts.1.isEmpty)
        }
    }

    private func date(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
}
