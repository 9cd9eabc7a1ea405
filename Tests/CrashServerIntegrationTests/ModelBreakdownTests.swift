import CrashWire
import Foundation
import HTTPTypes
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The crash detail's `models` breakdown reads whole days' counts and edge days' hours of
/// `group_model_daily`, and under `environment=` of `group_environment_model_daily`
/// (schema.sql): every window, whole days, edge hours, sub-hour edges, a window inside one day
/// or across one midnight, counts exactly the reports in it, of every environment or of one.
@Suite struct ModelBreakdownTests {
    @Test func modelsCountExactlyTheReportsOfEveryWindow() async throws {
        let p = try await makeProject()
        let first = utcMidnight(daysAgo: 3)
        var reports: [TestReport] = []
        var times: [(Date, String, String)] = []
        for day in 0..<3 {
            for hour in [0, 4, 5, 12, 19, 20, 23] {
                for minute in [10, 40] {
                    let time = first.addingTimeInterval(Double(day) * TimeWindow.day + Double(hour) * 3600 + Double(minute) * 60)
                    let model = ["m1", "m2", "m3", "m1", "m4"][(hour + day + minute / 40) % 5]
                    let environment = (hour + minute) % 3 == 0 ? "staging" : "production"
                    times.append((time, model, environment))
                    var object = queryReport("models", at: time, model: model).object
                    object["environment"] = environment
                    reports.append(TestReport(object: object))
                }
            }
        }
        let (sent, stamps) = (reports, times)
        let (d0, d1, d2) = (first, first.addingTimeInterval(TimeWindow.day), first.addingTimeInterval(2 * TimeWindow.day))
        let windows: [(Date, Date)] = [
            (d0.addingTimeInterval(5 * 3600), d2.addingTimeInterval(20 * 3600)),  // edge hours at both ends, one whole day
            (d0.addingTimeInterval(5 * 3600 + 1800), d2.addingTimeInterval(20 * 3600 + 900)),  // and sub-hour edges
            (d1.addingTimeInterval(3 * 3600), d1.addingTimeInterval(13 * 3600)),  // inside one day
            (d0.addingTimeInterval(22 * 3600), d1.addingTimeInterval(5 * 3600)),  // across one midnight, no whole day
            (d0, d2),  // whole days only
            (d0.addingTimeInterval(23 * 3600), d2.addingTimeInterval(3600)),  // one hour at each end
        ]
        try await withApp { client in
            try await client.send(sent, key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            for (from, to) in windows {
                for environment in [nil, "staging", "production"] {
                    var counts: [String: Int] = [:]
                    for (time, model, env) in stamps where time >= from && time < to && (environment == nil || env == environment) {
                        counts[model, default: 0] += 1
                    }
                    let expected = counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    let filter = environment.map { "&environment=\($0)" } ?? ""
                    let detail = try await client.query(
                        "/v1/projects/\(p.project)/crashes/\(id)?from=\(q(from))&to=\(q(to))\(filter)", token: p.readToken)
                    #expect(detail.status == .ok)
                    let breakdown = try #require(detail.json["breakdown"] as? [String: [[String: Any]]])
                    let models = breakdown["models"]?.map { "\($0["value"]!)=\($0["count"]!)" }
                    #expect(models == expected, "\(RFC3339.format(from)) to \(RFC3339.format(to)) \(environment ?? "every environment")")
                }
            }
        }
    }

    /// A database with the hourly models table (one row per group, hour and model) folds it
    /// into `group_model_daily`, adding to rows the daily table has, and drops it: schema.sql's
    /// block run in a transaction rolled back, on groups no test has.
    @Test func theHourlyTableFoldsIntoDays() async throws {
        let fold = try #require(Schema.statements.first { $0.contains("IF to_regclass('group_model_hourly') IS NOT NULL") })
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let logger = TestEnvironment.logger
            let g0 = Int64.random(in: -1_000_000_000 ... -1)
            let g = (g0, g0 - 1)
            let day = utcMidnight(daysAgo: 2)
            let rows: [String] = try await inRolledBackTransaction(db) { connection in
                try await connection.query(
                    """
                    CREATE TABLE group_model_hourly (group_id bigint NOT NULL, hour timestamptz NOT NULL, model text NOT NULL,
                                                     count bigint NOT NULL, PRIMARY KEY (group_id, hour, model))
                    """, logger: logger)
                try await connection.query(
                    """
                    INSERT INTO group_model_hourly (group_id, hour, model, count)
                    SELECT x.g, \(day)::timestamptz + x.h * interval '1 hour', x.m, x.n
                    FROM unnest(\([g.0, g.0, g.0, g.0, g.1])::bigint[], \([3, 5, 24, 3, 23])::int[], \(["a", "a", "a", "b", "a"])::text[],
                                \([2, 1, 4, 1, 7] as [Int64])::bigint[]) AS x(g, h, m, n)
                    """, logger: logger)
                // A key the daily table has already: the hours add up.
                try await connection.query(
                    """
                    INSERT INTO group_model_daily (group_id, day, count, model, hours)
                    VALUES (\(g.0), \(day), 3, 'a', '\\x0300000003'::bytea)
                    """, logger: logger)
                try await connection.query(PostgresQuery(unsafeSQL: fold), logger: logger)
                let result = try await connection.query(
                    """
                    SELECT s FROM (
                        SELECT format('%s %s %s %s %s', CASE group_id WHEN \(g.0) THEN 'g0' ELSE 'g1' END,
                                      (day - \(day)::timestamptz)::text, model, count,
                                      (SELECT string_agg(h.hour || ':' || h.count, ',' ORDER BY h.hour) FROM crashguard_model_hours(hours) h))
                        FROM group_model_daily WHERE group_id = ANY(\([g.0, g.1])::bigint[])
                        UNION ALL SELECT 'hourly table: ' || (to_regclass('group_model_hourly') IS NOT NULL)::text
                    ) x(s) ORDER BY s COLLATE "C"
                    """, logger: logger)
                var out: [String] = []
                for try await row in result.decode(String.self) { out.append(row) }
                return out
            }
            #expect(
                rows == [
                    "g0 00:00:00 a 6 3:5,5:1", "g0 00:00:00 b 1 3:1", "g0 1 day a 4 0:4", "g1 00:00:00 a 7 23:7",
                    "hourly table: false",
                ])
        }
    }
}
