import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Hardening, "Bounded queries": a stats or trend answer holds at most 10,000 points, every read
/// runs under PostgreSQL's statement timeout, and a read that hits it is a 503.
@Suite struct BoundedQueryTests {
    /// The finding: `stats?groupBy=version` over 200 versions and 90 days by hour answered
    /// 432,000 points. Now the 4 series of highest total that fit 2,160 buckets are kept (a
    /// tie at the cut goes to the lower key) and the answer says it was cut.
    @Test func statsOf200VersionsOver90DaysHourlyKeepTheTopSeriesThatFit() async throws {
        let big = try await BigStatsProject.shared.value
        try await withApp { client in
            let answer = try await client.execute(
                uri: "/v1/projects/\(big.project.project)/stats?groupBy=version&interval=hour&from=\(q(big.from))&to=\(q(big.to))",
                method: .get, headers: [.authorization: "Bearer \(big.project.readToken)"])
            #expect(answer.status == .ok)
            #expect(answer.body.readableBytes < 1_000_000, "\(answer.body.readableBytes) bytes")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.readableBytesView)) as? [String: Any])
            let series = try #require(json["series"] as? [[String: Any]])
            let points = series.map { ($0["points"] as? [[String: Any]] ?? []).count }
            #expect(points.reduce(0, +) <= 10_000, "\(points.reduce(0, +)) points")
            #expect(points.allSatisfy { $0 == 2160 }, "\(points)")
            #expect(json["truncated"] as? Bool == true)
            // The four of highest total, listed highest version first; "1.0.100" and "1.0.99"
            // tie and "1.0.100" is the lower key in byte order.
            #expect(series.map { $0["key"] as? String } == ["1.0.150", "1.0.100", "1.0.42", "1.0.7"])
            for entry in series {
                let key = try #require(entry["key"] as? String)
                let total = (entry["points"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["count"] as? Int ?? 0) }
                #expect(Int64(total) == 2160 * BigStatsProject.hourlyCount(Int(key.dropFirst(4))!), "\(key)")
            }

            // Uncut answers carry no `truncated`: one series over 90 days, or every version by
            // day over 30 (200 x 31 points).
            let month = big.to.addingTimeInterval(-30 * TimeWindow.day)
            for (grouping, interval, from, count) in [("none", "hour", big.from, 1), ("version", "day", month, 200)] {
                let uncut = try await client.query(
                    "/v1/projects/\(big.project.project)/stats?groupBy=\(grouping)&interval=\(interval)&from=\(q(from))&to=\(q(big.to))",
                    token: big.project.readToken)
                #expect(uncut.status == .ok)
                #expect(uncut.json["truncated"] == nil, "\(grouping) \(interval)")
                #expect((uncut.json["series"] as? [[String: Any]])?.count == count, "\(grouping) \(interval)")
            }
        }
    }

    /// `groupBy=fatal` has two fixed series: over 300 days by hour (7,200 buckets) only one
    /// fits, the one of higher total.
    @Test func fatalSplitPastTheBudgetKeepsTheLargerSeries() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await client.send(
                [queryReport("fatal split", at: now, fatal: true)] + (0..<3).map { _ in queryReport("fatal split", at: now) },
                key: p.ingestKey)
            let from = TimeWindow.floor(now, TimeWindow.hour).addingTimeInterval(-299 * TimeWindow.day)
            let to = TimeWindow.floor(now, TimeWindow.hour).addingTimeInterval(TimeWindow.day)
            let answer = try await client.query(
                "/v1/projects/\(p.project)/stats?groupBy=fatal&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(answer.status == .ok)
            let series = answer.json["series"] as? [[String: Any]] ?? []
            #expect(series.map { $0["key"] as? String } == ["nonFatal"])
            #expect(answer.json["truncated"] as? Bool == true)
        }
    }

    /// Buckets alone past the budget (2 years by hour) are a 400 naming the interval, on the
    /// stats and on the list's trend; by day the window's own limit applies.
    @Test func twoYearsByHourIs400NamingTheInterval() async throws {
        let p = try await makeProject()
        let to = TimeWindow.floor(Date(), TimeWindow.hour)
        let from = to.addingTimeInterval(-730 * TimeWindow.day)
        try await withApp { client in
            let stats = try await client.query(
                "/v1/projects/\(p.project)/stats?interval=hour&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(stats.status == .badRequest)
            #expect(stats.json.error.hasPrefix("interval:"), "\(stats.json)")
            let implicit = try await client.query("/v1/projects/\(p.project)/stats?groupBy=version&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(implicit.status == .badRequest)
            #expect(implicit.json.error.hasPrefix("interval:"), "\(implicit.json)")
            let trend = try await client.query(
                "/v1/projects/\(p.project)/crashes?trend=hour&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(trend.status == .badRequest)
            #expect(trend.json.error.hasPrefix("trend:") && trend.json.error.contains("interval"), "\(trend.json)")
            // By day it is 730 points, refused only as a window over 400 days.
            let daily = try await client.query(
                "/v1/projects/\(p.project)/stats?interval=day&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(daily.status == .badRequest)
            #expect(daily.json.error.hasPrefix("from:"), "\(daily.json)")
            // A window of centuries by hour is refused without listing its buckets.
            let far = try await client.query(
                "/v1/projects/\(p.project)/stats?from=0001-01-01T00:00:00Z&to=9999-01-01T00:00:00Z", token: p.readToken)
            #expect(far.status == .badRequest)
            #expect(far.json.error.hasPrefix("interval:"), "\(far.json)")
        }
    }

    /// The list's trends count across rows: 10 rows of 2,160 hourly points would be 21,600, so
    /// only the 4 rows of highest count keep their trend (a tie at the cut goes to the lower
    /// group id), whatever the sort; by day all 10 fit and nothing is cut.
    @Test func listTrendsShareOneBudgetAcrossRows() async throws {
        let p = try await makeProject()
        let now = Date()
        let sizes = [9, 8, 7, 6, 6, 2, 1, 1, 1, 1]
        // Older groups have more reports, so lastSeen order is not count order.
        var built: [TestReport] = []
        for (i, size) in sizes.enumerated() {
            let reason = "trend budget " + String(repeating: "q", count: i + 1)
            for k in 0..<size {
                let age = Double(i * 3600 + k * 60) + 86_400 * Double(9 - i)
                built.append(queryReport(reason, at: now.addingTimeInterval(-age)))
            }
        }
        let reports = built
        let from = now.addingTimeInterval(-90 * TimeWindow.day)
        let to = now.addingTimeInterval(60)
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            for sort in ["count", "lastSeen"] {
                let page = try await client.query(
                    "/v1/projects/\(p.project)/crashes?trend=hour&limit=10&sort=\(sort)&from=\(q(from))&to=\(q(to))", token: p.readToken)
                #expect(page.status == .ok)
                let groups = page.json.groups
                #expect(groups.count == 10)
                #expect(page.json["truncated"] as? Bool == true, "\(sort)")
                let withTrend = groups.filter { $0["trend"] != nil }
                let points = withTrend.map { ($0["trend"] as? [[String: Any]] ?? []).count }
                #expect(points.reduce(0, +) <= 10_000, "\(sort): \(points)")
                #expect(withTrend.count == 4, "\(sort)")
                let tied = groups.filter { $0["count"] as? Int == 6 }.compactMap { Int64($0["id"] as? String ?? "") }.sorted()
                try #require(tied.count == 2)
                let expected = Set(groups.filter { ($0["count"] as? Int ?? 0) >= 7 }.compactMap { $0["id"] as? String } + [String(tied[0])])
                #expect(Set(withTrend.compactMap { $0["id"] as? String }) == expected, "\(sort)")
                for group in withTrend {
                    let sum = (group["trend"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["count"] as? Int ?? 0) }
                    #expect(sum == group["count"] as? Int)
                }
            }
            let daily = try await client.query(
                "/v1/projects/\(p.project)/crashes?trend=day&limit=10&from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(daily.status == .ok)
            #expect(daily.json["truncated"] == nil)
            let days = daily.json.groups.map { ($0["trend"] as? [[String: Any]])?.count ?? 0 }
            #expect(days.count == 10 && Set(days).count == 1 && days[0] >= 91, "\(days)")
        }
    }

    /// Both query pools start their sessions with `CRASHGUARD_QUERY_TIMEOUT`; the primary's
    /// general pool and the ingest pool keep theirs.
    @Test func theQueryPoolsCarryTheStatementTimeout() async throws {
        let config = TestEnvironment.configuration {
            $0.queryTimeout = .seconds(1.5)
            $0.databaseReadURL = TestEnvironment.databaseURL
        }
        #expect(ServerConfiguration().queryTimeout == .seconds(10))
        #expect(try ServerConfiguration(environment: ["CRASHGUARD_QUERY_TIMEOUT": "2.5"]).queryTimeout == .seconds(2.5))
        #expect(throws: ConfigurationError.self) {
            var bad = TestEnvironment.configuration()
            bad.queryTimeout = .seconds(0)
            try bad.validate()
        }
        try await withTestDatabase(config) { db in
            let reader = try #require(db.reader)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await reader.client.run() }
                defer { group.cancelAll() }
                func timeout(_ client: PostgresClient) async throws -> String {
                    let rows = try await client.query(
                        "SELECT current_setting('statement_timeout') || ' ' || current_setting('application_name')",
                        logger: TestEnvironment.logger)
                    for try await value in rows.decode(String.self) { return value }
                    return ""
                }
                let queries = try await timeout(db.queryClient), standby = try await timeout(reader.client)
                let primary = try await timeout(db.client), ingest = try await timeout(db.ingestClient)
                #expect(queries == "1500ms crash-server queries")
                #expect(standby == "1500ms crash-server-reader")
                #expect(primary == "0 crash-server")
                #expect(ingest.hasSuffix("crash-server ingest") && ingest != "1500ms crash-server ingest", "\(ingest)")
            }
        }
    }

    /// A read statement past the timeout is ended by PostgreSQL: the read throws the 503 with
    /// `Retry-After` at the timeout, not when the statement would have ended, and the session
    /// runs nothing afterwards.
    @Test func aReadPastTheTimeoutIsEndedAndAnswered503() async throws {
        let config = TestEnvironment.configuration { $0.queryTimeout = .seconds(0.3) }
        try await withTestDatabase(config) { db in
            let marker = "bounded-\(UUID().uuidString)"
            let start = ContinuousClock.now
            let error = await #expect(throws: APIError.self) {
                try await PostgresQueryStore(database: db).read { reader in
                    let rows = try await reader.connection.query("SELECT pg_sleep(20)::text, \(marker)::text", logger: TestEnvironment.logger)
                    for try await _ in rows.decode((String, String).self) {}
                }
            }
            let elapsed = ContinuousClock.now - start
            #expect(elapsed < .seconds(10), "\(elapsed)")
            #expect(error?.status == .serviceUnavailable)
            #expect((error?.retryAfter ?? 0) >= 1)
            #expect(error?.message.hasPrefix("query timeout") == true)
            // Nothing of it still runs in PostgreSQL, and the pool serves the next read.
            let rows = try await db.client.query(
                """
                SELECT count(*)::bigint FROM pg_stat_activity
                WHERE state = 'active' AND query LIKE '%pg_sleep%' AND application_name = \(QueryTimeouts.applicationName)
                """, logger: TestEnvironment.logger)
            for try await n in rows.decode(Int64.self) { #expect(n == 0) }
            let one = try await PostgresQueryStore(database: db).read { reader in
                let rows = try await reader.connection.query("SELECT 1", logger: TestEnvironment.logger)
                for try await n in rows.decode(Int.self) { return n }
                return 0
            }
            #expect(one == 1)
        }
    }

    /// Through the routes: a stats query slower than a tiny timeout is a 503 with
    /// `Retry-After` and an `{"error"}` body, on the primary's query pool and on the standby's.
    @Test(arguments: [false, true])
    func aSlowStatsQueryIs503WithRetryAfter(standby: Bool) async throws {
        let big = try await BigStatsProject.shared.value
        let config = TestEnvironment.configuration {
            $0.queryTimeout = .seconds(0.02)
            if standby { $0.databaseReadURL = TestEnvironment.databaseURL }
        }
        try await withApp(config) { client in
            if standby {
                var up = false
                for _ in 0..<100 where !up {
                    up = String(buffer: try await client.execute(uri: "/healthz", method: .get).body).contains(#""up":true"#)
                    if !up { try await Task.sleep(for: .milliseconds(50)) }
                }
                try #require(up)
            }
            let answer = try await client.execute(
                uri: "/v1/projects/\(big.project.project)/stats?groupBy=version&from=\(q(big.from))&to=\(q(big.to))",
                method: .get, headers: [.authorization: "Bearer \(big.project.readToken)"])
            #expect(answer.status == .serviceUnavailable)
            #expect(answer.headers[.retryAfter].flatMap(Int.init).map { $0 >= 1 } == true)
            #expect(answer.errorMessage?.hasPrefix("query timeout") == true, "\(String(buffer: answer.body))")
            if standby {
                let text = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
                let line = text.split(separator: "\n").first { $0.hasPrefix(#"crashguard_reads_total{target="primary"}"#) }
                // The standby's timeout ended it: it did not fall back to the primary.
                #expect(line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0 == 0, "\(line ?? "-")")
            }
        }
    }
}

/// A project with 200 app versions reporting every hour of the last 90 days (432,000 rows of
/// `project_hourly`, written directly: ingesting that many reports would take minutes), made
/// once for the tests that need it.
struct BigStatsProject: Sendable {
    let project: ProjectCredentials
    let from: Date
    let to: Date

    static let shared = Task { try await BigStatsProject.make() }

    /// Reports per hour of version `1.0.<v>`: 7, 150 and 42 lead, 99 and 100 tie next.
    static func hourlyCount(_ v: Int) -> Int64 {
        switch v {
        case 7: 500
        case 150: 400
        case 42: 300
        case 99, 100: 250
        default: Int64(1 + v % 50)
        }
    }

    static func make() async throws -> BigStatsProject {
        let project = try await makeProject()
        let to = TimeWindow.floor(Date(), TimeWindow.hour)
        let from = to.addingTimeInterval(-90 * TimeWindow.day)
        let id = try await projectID(project.project)
        try await withTestDatabase { db in
            let versions = (0..<200).map { "1.0.\($0)" }
            let counts = (0..<200).map { hourlyCount($0) }
            _ = try await db.client.query(
                """
                INSERT INTO project_hourly (project_id, hour, kind, app_version, count)
                SELECT \(id), h, 'custom', v.version, v.count
                FROM unnest(\(versions)::text[], \(counts)::bigint[]) AS v(version, count),
                     generate_series(\(from)::timestamptz, \(to)::timestamptz - interval '1 hour', interval '1 hour') AS h
                """, logger: TestEnvironment.logger)
        }
        return BigStatsProject(project: project, from: from, to: to)
    }
}

/// The database id of the project `slug`.
func projectID(_ slug: String) async throws -> Int64 {
    try await withTestDatabase { db in
        let rows = try await db.client.query("SELECT id FROM projects WHERE slug = \(slug)", logger: TestEnvironment.logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw ProjectError(description: "no project \(slug)")
    }
}
