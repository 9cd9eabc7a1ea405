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

        let edges = sql(TimeWindow(from: date("2026-10-30T00:50:00Z"), to: date("2026-11-29T05:30:00Z")), version)
        #expect(edges.contains("group_version_hourly"))
        #expect(edges.contains("FROM reports"), "sub-hour edges: \(edges)")
        #expect(!edges.contains("-1 AS n"), "10 minutes of the first hour and half of the last are read as they are: \(edges)")
        #expect(!edges.contains("rollup_pending"))
        // 40 minutes of the first hour are in the window: it is read as its hour minus the 20
        // minutes before the window.
        func subtractions(_ sql: String) -> Int { sql.components(separatedBy: "-1 AS n FROM reports").count - 1 }
        let halfAndHalf = TimeWindow(from: date("2026-10-30T00:20:00Z"), to: date("2026-11-29T05:30:00Z"))
        #expect(subtractions(sql(halfAndHalf, version)) == 1, "\(sql(halfAndHalf, version))")
        // A cursor's later pages count as of its snapshot, reports after it taken away: one
        // subtraction, of those, and the edge read as it is.
        #expect(subtractions(sql(halfAndHalf, version, snapshot: "10:20:")) == 1)

        #expect(sql(days, version, pending: true).contains("rollup_pending"))
        #expect(sql(days, version, snapshot: "10:20:").contains("pg_visible_in_snapshot"))

        let app = sql(days, GroupFilters(app: "com.example"))
        #expect(app.contains("group_daily") && !app.contains("group_version"), "an app filter reads group_daily: \(app)")
        #expect(!app.contains("group_hourly") && !app.contains("reports"), "\(app)")
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
