import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Counts per group and bucket (`hour` or `day`, UTC) over `window` under the report
    /// filters (`app`, `version`, `os`): the list's `trend`. Whole hours come from the
    /// rollups (`group_version_hourly` without app/os filters, `group_hourly` with them),
    /// and for daily buckets whole days from the daily ones (`group_version_daily`,
    /// `group_daily`), so a 30-day sparkline reads about 30 rows per group, not 720;
    /// sub-hour edges come from raw reports. Only non-zero buckets are returned.
    func groupTrends(
        project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters f: GroupFilters,
        on connection: PostgresConnection
    ) async throws -> [Int64: [Date: Int64]] {
        guard !ids.isEmpty else { return [:] }
        // Daily buckets: whole UTC days from the daily rollups, edge hours from the hourly
        // ones. Hourly buckets: hours only (the plan's day range is then empty).
        let plan = unit == .day ? window.plan : window.hourPlan
        let (h0, h1) = plan.hours[0], (h2, h3) = plan.hours[1]
        let (d0, d1) = plan.days
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        let scoped = f.app == nil && f.os == nil
        let version = f.version ?? ""
        // One row per group with its buckets as two arrays: a row per bucket cost a
        // row-stream step each (25 rows x 168 hours on the dashboard's 7-day page).
        let rows = try await connection.query(
            """
            SELECT group_id, array_agg(t), array_agg(n) FROM (
            SELECT group_id, date_trunc(\(unit), t) AS t, sum(n)::bigint AS n FROM (
                SELECT group_id, day AS t, count AS n FROM group_version_daily
                WHERE \(scoped) AND group_id = ANY(\(ids)) AND app_version = \(version) AND day >= \(d0) AND day < \(d1)
                UNION ALL
                SELECT group_id, hour, count FROM group_version_hourly
                WHERE \(scoped) AND group_id = ANY(\(ids)) AND app_version = \(version)
                  AND (hour >= \(h0) AND hour < \(h1) OR hour >= \(h2) AND hour < \(h3))
                UNION ALL
                SELECT group_id, day, count FROM group_daily
                WHERE NOT \(scoped) AND project_id = \(project) AND group_id = ANY(\(ids)) AND day >= \(d0) AND day < \(d1)
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                  AND (\(f.os)::text IS NULL OR os = \(f.os))
                UNION ALL
                SELECT group_id, hour, count FROM group_hourly
                WHERE NOT \(scoped) AND project_id = \(project) AND group_id = ANY(\(ids))
                  AND (hour >= \(h0) AND hour < \(h1) OR hour >= \(h2) AND hour < \(h3))
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                  AND (\(f.os)::text IS NULL OR os = \(f.os))
                UNION ALL
                SELECT group_id, ts, 1 FROM reports
                WHERE project_id = \(project) AND group_id = ANY(\(ids))
                  AND ((ts >= \(r0) AND ts < \(r1)) OR (ts >= \(r2) AND ts < \(r3)))
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                  AND (\(f.os)::text IS NULL OR COALESCE(os, '') = \(f.os))
            ) x GROUP BY 1, 2
            ) b GROUP BY group_id
            """, logger: logger)
        var out: [Int64: [Date: Int64]] = [:]
        for try await (id, times, counts) in rows.decode((Int64, [Date], [Int64]).self) {
            out[id] = Dictionary(zip(times, counts), uniquingKeysWith: +)
        }
        return out
    }

    /// Project-wide counts per bucket split into fatal and non-fatal reports (`stats`
    /// with `groupBy=fatal`), from `group_hourly` and raw reports at sub-hour edges.
    func fatalStats(
        project: Int64, window: TimeWindow, unit: StatsInterval, on connection: PostgresConnection
    ) async throws -> [(t: Date, key: String?, n: Int64)] {
        let plan = window.hourPlan
        let (h0, h1) = plan.hours[0]
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        let rows = try await connection.query(
            """
            SELECT date_trunc(\(unit), t), sum(f)::bigint, sum(n)::bigint FROM (
                SELECT hour AS t, fatal_count AS f, count AS n FROM group_hourly
                WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1)
                UNION ALL
                SELECT ts, CASE WHEN fatal THEN 1 ELSE 0 END, 1 FROM reports
                WHERE project_id = \(project) AND ((ts >= \(r0) AND ts < \(r1)) OR (ts >= \(r2) AND ts < \(r3)))
            ) x GROUP BY 1
            """, logger: logger)
        var out: [(Date, String?, Int64)] = []
        for try await (t, fatal, n) in rows.decode((Date, Int64, Int64).self) {
            out.append((t, "fatal", fatal))
            out.append((t, "nonFatal", n - fatal))
        }
        return out
    }
}
