import Foundation
import PostgresNIO

extension PostgresQueryStore.Reader {
    /// Counts per group and bucket (`hour` or `day`, UTC) over `window` under the report
    /// filters (`app`, `version`, `os`, `environment`): the list's `trend`. Whole hours come
    /// from the rollups (`group_version_hourly` without app/os/environment filters,
    /// `group_hourly` with them), and for daily buckets whole days from the daily ones
    /// (`group_version_daily`, `group_environment_daily` with only `environment=` and a version,
    /// `group_daily`), so a 30-day sparkline reads about 30 rows per group, not 720;
    /// sub-hour edges come from raw reports. Only non-zero buckets are returned.
    func groupTrends(
        project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters f: GroupFilters
    ) async throws -> [Int64: [Date: Int64]] {
        guard !ids.isEmpty else { return [:] }
        // Daily buckets: whole UTC days from the daily rollups, edge hours from the hourly
        // ones. Hourly buckets: hours only (the plan's day range is then empty).
        let level = f.level
        let plan = unit == .day ? window.plan(for: level) : level == .reports ? window.reportsPlan : window.hourPlan
        let scoped = level == .versions
        let environmental = level == .environments
        let version = f.reports.versions.first ?? ""
        // `environment=` alone: hours per group and environment, not per app, version and OS too.
        let environmentHours = environmental && version.isEmpty
        // A merge target's trend counts the reports of the groups merged into it.
        let members = try await memberIDs(ids)
        // One row per group with its buckets as two arrays: a row per bucket cost a
        // row-stream step each (25 rows x 168 hours on the dashboard's 7-day page).
        let rows = try await connection.query(
            """
            SELECT group_id, array_agg(t), array_agg(n) FROM (
            SELECT o.owner AS group_id, date_trunc(\(unit), t) AS t, sum(n)::bigint AS n FROM (
                SELECT group_id, day AS t, count AS n FROM group_version_daily
                WHERE \(scoped) AND group_id = ANY(\(members)) AND app_version = \(version) AND \("day", in: plan.days)
                UNION ALL
                SELECT group_id, hour, count FROM group_version_hourly
                WHERE \(scoped) AND group_id = ANY(\(members)) AND app_version = \(version)
                  AND (\("hour", in: plan.hoursHead) OR \("hour", in: plan.hoursTail))
                UNION ALL
                SELECT group_id, day, count FROM group_environment_daily
                WHERE \(environmental) AND group_id = ANY(\(members)) AND environment = ANY(\(f.environments)::text[])
                  AND app_version = \(version) AND \("day", in: plan.days)
                UNION ALL
                SELECT group_id, day, count FROM group_daily
                WHERE NOT \(scoped) AND NOT \(environmental) AND project_id = \(project) AND group_id = ANY(\(members)) AND \("day", in: plan.days)
                  AND \(reportFilter: f)
                UNION ALL
                SELECT m.group_id, m.day + e.hour * interval '1 hour', e.count
                FROM group_environment_hours m CROSS JOIN LATERAL crashguard_model_hours(m.hours) e
                WHERE \(environmentHours) AND m.group_id = ANY(\(members)) AND m.environment = ANY(\(f.environments)::text[])
                  AND \(dayHoursIn: [plan.hoursHead, plan.hoursTail])
                UNION ALL
                SELECT group_id, hour, \(rollupCount: f) FROM group_hourly
                WHERE NOT \(scoped) AND NOT \(environmentHours) AND project_id = \(project) AND group_id = ANY(\(members))
                  AND (\("hour", in: plan.hoursHead) OR \("hour", in: plan.hoursTail))
                  AND \(reportFilter: f)
                UNION ALL
                SELECT group_id, ts, 1 FROM reports
                WHERE project_id = \(project) AND group_id = ANY(\(members))
                  AND ((\("ts", in: plan.rawHead)) OR (\("ts", in: plan.rawTail)))
                  AND \(reportFilter: f, onReports: true)
            ) x JOIN \(owners: ids) o ON o.member = x.group_id GROUP BY 1, 2
            ) b GROUP BY group_id
            """, logger: logger)
        var out: [Int64: [Date: Int64]] = [:]
        for try await (id, times, counts) in rows.decode((Int64, [Date], [Int64]).self) {
            out[id] = Dictionary(zip(times, counts), uniquingKeysWith: +)
        }
        return out
    }

    /// Project-wide counts per bucket (`hour` or `day`) and key (`kind`, `version`,
    /// `environment` or none), of the reports in `environments` when given. Whole hours come
    /// from `project_hourly` when split by kind or version, else from
    /// `project_environment_hourly` (a row per hour and environment); sub-hour edges from raw
    /// reports.
    func stats(
        project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int, environments: [String]
    ) async throws -> [(t: Date, key: String?, n: Int64)] {
        let plan = window.hourPlan
        let split = groupBy == .kind || groupBy == .version
        // Only the buckets of the maxSeries + 1 keys of highest total (ties by key, in byte
        // order) leave the database: enough for the caller to keep maxSeries and to know that
        // it cut, without sending every version's buckets (10,000 versions by 2,160 hours).
        let keys = Int64(min(maxSeries, Int(Int32.max) - 1) + 1)
        let rows = try await connection.query(
            """
            WITH b AS (
                SELECT date_trunc(\(unit), t) AS t, key, sum(n)::bigint AS n FROM (
                    SELECT hour AS t, CASE \(groupBy) WHEN 'kind' THEN kind WHEN 'version' THEN app_version
                                      WHEN 'environment' THEN environment END AS key, count AS n
                    FROM project_hourly WHERE \(split) AND project_id = \(project) AND \("hour", in: plan.hoursHead)
                      AND \(environmentFilter: environments)
                    UNION ALL
                    SELECT hour, CASE \(groupBy) WHEN 'environment' THEN environment END, count
                    FROM project_environment_hourly WHERE NOT \(split) AND project_id = \(project) AND \("hour", in: plan.hoursHead)
                      AND \(environmentFilter: environments)
                    UNION ALL
                    SELECT ts, CASE \(groupBy) WHEN 'kind' THEN kind WHEN 'version' THEN app_version WHEN 'environment' THEN environment END, 1
                    FROM reports WHERE project_id = \(project) AND ((\("ts", in: plan.rawHead)) OR (\("ts", in: plan.rawTail)))
                      AND \(environmentFilter: environments)
                ) x GROUP BY 1, 2
            ), k AS (
                SELECT key FROM b GROUP BY key ORDER BY sum(n) DESC, key COLLATE "C" LIMIT \(keys)
            )
            SELECT b.t, b.key, b.n FROM b WHERE EXISTS (SELECT 1 FROM k WHERE k.key IS NOT DISTINCT FROM b.key)
            """, logger: logger)
        var out: [(Date, String?, Int64)] = []
        for try await (t, key, n) in rows.decode((Date, String?, Int64).self) { out.append((t, key, n)) }
        return out
    }

    /// Project-wide counts per bucket split into fatal and non-fatal reports (`stats`
    /// with `groupBy=fatal`), from `project_environment_hourly` and raw reports at sub-hour edges.
    func fatalStats(
        project: Int64, window: TimeWindow, unit: StatsInterval, environments: [String]
    ) async throws -> [(t: Date, key: String?, n: Int64)] {
        let plan = window.hourPlan
        let rows = try await connection.query(
            """
            SELECT date_trunc(\(unit), t), sum(f)::bigint, sum(n)::bigint FROM (
                SELECT hour AS t, fatal_count AS f, count AS n FROM project_environment_hourly
                WHERE project_id = \(project) AND \("hour", in: plan.hoursHead) AND \(environmentFilter: environments)
                UNION ALL
                SELECT ts, CASE WHEN fatal THEN 1 ELSE 0 END, 1 FROM reports
                WHERE project_id = \(project) AND ((\("ts", in: plan.rawHead)) OR (\("ts", in: plan.rawTail)))
                  AND \(environmentFilter: environments)
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
