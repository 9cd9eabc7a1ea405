import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension PostgresQueryStore.Reader {
    /// Group rows by id.
    func groupRows(project: Int64, ids: [Int64]) async throws -> [Int64: GroupRow] {
        // A snooze whose time has come reads as open at once (``SnoozeWaker`` writes it soon after).
        let rows = try await connection.query(
            """
            SELECT g.id, g.signature, g.kind, g.grouping_version, g.title, LEAST(g.first_seen, m.first), GREATEST(g.last_seen, m.last),
                   CASE WHEN g.snooze_until <= now() THEN 'open' ELSE g.status END, g.fatal OR COALESCE(m.fatal, false), g.resolved_in,
                   g.assignee, g.merged_into, COALESCE(m.ids, '{}')
            FROM crash_groups g
            LEFT JOIN LATERAL (
                -- The groups merged into this one: their ids, and their reports' times and fatal flag.
                SELECT array_agg(id ORDER BY id) AS ids, min(first_seen) AS first, max(last_seen) AS last, bool_or(fatal) AS fatal
                FROM crash_groups WHERE merged_into = g.id
            ) m ON true
            WHERE g.project_id = \(project) AND g.id = ANY(\(ids))
            """, logger: logger)
        var out: [Int64: GroupRow] = [:]
        for try await (id, signature, kind, version, title, first, last, status, fatal, resolvedIn, assignee, mergedInto, merged)
            in rows.decode(
                (Int64, String, String, String, String, Date, Date, GroupStatus, Bool, String?, String?, Int64?, [Int64]).self)
        {
            out[id] = GroupRow(
                id: id, signature: signature, kind: kind, groupingVersion: version, title: title, firstSeen: first,
                lastSeen: last,
                status: status, fatal: fatal, resolvedIn: resolvedIn, assignee: assignee, mergedInto: mergedInto, merged: merged)
        }
        for (id, snooze) in try await snoozes(ids: out.filter { $0.value.status == .ignored }.map(\.key)) { out[id]?.snoozed = snooze }
        return out
    }

    /// Every app version seen per group since `since`, highest first.
    func versions(ids: [Int64], since: Date) async throws -> [Int64: [String]] {
        // One row per group (a row per version cost a row-stream step each); a version whose
        // last report is past retention is left out.
        let rows = try await connection.query(
            """
            SELECT o.owner, array_agg(DISTINCT f.value) FROM \(owners: ids) o
            JOIN group_facets f ON f.group_id = o.member AND f.facet = 'version' AND f.last_seen >= \(since) GROUP BY o.owner
            """, logger: logger)
        var out: [Int64: [String]] = [:]
        for try await (id, list) in rows.decode((Int64, [String]).self) {
            out[id] = list.map { (key: AppVersion.Key($0), text: $0) }.sorted { a, b in
                let c = a.key.compare(b.key)
                return c != 0 ? c > 0 : a.text > b.text
            }.map(\.text)
        }
        return out
    }

    /// Groups with at most this many reports in a window get an exact `devices`; larger
    /// ones an estimate from their device sketches (see docs/api.md).
    static let exactDeviceLimit: Int64 = 250

    /// Distinct non-empty device ids per group in `window` under the report filters.
    ///
    /// Exact (from raw reports, `reports_group_ts`) for groups with at most
    /// ``exactDeviceLimit`` reports in the window, and whenever a report filter or term other
    /// than one version and `environment=` is set; otherwise estimated from the HyperLogLog
    /// sketches of the whole hours and days the window touches (about 3 % standard error), for
    /// all versions or the filtered one: a partial day at an edge is one day row where that adds
    /// (nearly) nothing (``TimeWindow/sketchPlan(now:notBefore:)``). Under `environment=` the days
    /// are those of `group_environment_daily` and the edge hours' devices are read from the
    /// reports (that table is daily only), their sketch registers computed by
    /// `crashguard_device_register`, as ingest's are.
    func deviceCounts(
        project: Int64, counts: [Int64: Int64], window: TimeWindow, since: Date, filters f: GroupFilters
    ) async throws -> [Int64: Int64] {
        let level = f.level
        let sketchable = level == .versions || level == .environments
        var exact: [Int64] = [], estimated: [Int64] = []
        for (id, n) in counts {
            if sketchable && n > Self.exactDeviceLimit { estimated.append(id) } else { exact.append(id) }
        }
        if sketchable, !f.reports.versions.isEmpty || level == .environments, !exact.isEmpty {
            // Few reports of the version or environments asked for, but an exact count reads every
            // report of the group in the window, of every version and environment
            // (`reports_group_ts` has neither): a group with more than the limit in all takes the
            // sketches instead (one version's devices of the top groups of 30 days at 200,000
            // reports: 50 to 85 ms read exactly).
            let large = try await groupsOver(Self.exactDeviceLimit, ids: exact)
            exact.removeAll { large.contains($0) }
            estimated += large
        }
        var out: [Int64: Int64] = [:]
        if !exact.isEmpty {
            // Each owner's reports read through `reports_group_ts`, one owner after the other
            // (LATERAL), and by group alone: the groups are the project's, and a `project_id`
            // condition lets the planner take `reports_project_xact` instead whenever the
            // partitions' statistics predate the project's reports (a new project, or a burst
            // before autovacuum's next ANALYZE): every report of the project read once per
            // group, past the 10 s statement timeout (docs/performance.md).
            let rows = try await connection.query(
                """
                SELECT o.owner, d.devices FROM (SELECT owner, array_agg(member) AS members FROM \(owners: exact) m GROUP BY owner) o
                CROSS JOIN LATERAL (
                    SELECT count(DISTINCT device_id)::bigint AS devices FROM reports
                    WHERE group_id = ANY(o.members) AND ts >= \(window.from) AND ts < \(window.to)
                      AND device_id <> ''
                      AND \(reportFilter: f, onReports: true)
                ) d
                WHERE d.devices > 0
                """, logger: logger)
            for try await (id, n) in rows.decode((Int64, Int64).self) { out[id] = n }
        }
        if !estimated.isEmpty {
            let plan = window.sketchPlan(now: Date(), notBefore: since)
            let version = f.reports.versions.first ?? ""
            // One row per group: its sketches concatenated (a list of entries in any order is
            // a valid stored form to merge). A row per sketch cost a row-stream step each, about
            // 10 ms for the top 25 groups of 7 days at 10 M reports.
            var queries: [PostgresQuery]
            if level == .environments {
                queries = [
                    """
                    SELECT o.owner, string_agg(sketch, ''::bytea) FROM \(owners: estimated) o JOIN group_environment_daily x
                      ON x.group_id = o.member AND x.environment = ANY(\(f.environments)::text[]) AND x.app_version = \(version)
                     AND \("x.day", in: plan.days)
                    GROUP BY o.owner
                    """
                ]
                let edgeHours = [plan.hoursHead, plan.hoursTail].filter { !$0.isEmpty }
                if !edgeHours.isEmpty {
                    // The edge hours' devices, each group's distinct ones once, as sketch entries.
                    queries.append(
                        """
                        SELECT e.owner, string_agg(int2send(d.register::int2) || substring(int2send(d.rank::int2) FROM 2 FOR 1), ''::bytea)
                        FROM (
                            SELECT DISTINCT o.owner, r.device_id FROM \(owners: estimated) o JOIN reports r ON r.group_id = o.member
                            WHERE r.project_id = \(project) AND \("r.ts", inAny: edgeHours)
                              AND r.device_id <> '' AND \(reportFilter: f, onReports: true)
                        ) e CROSS JOIN LATERAL crashguard_device_register(e.device_id) d
                        GROUP BY e.owner
                        """)
                }
            } else {
                queries = [
                    """
                    SELECT o.owner, string_agg(sketch, ''::bytea) FROM \(owners: estimated) o JOIN (
                        SELECT group_id, sketch FROM group_version_daily
                        WHERE group_id IN (SELECT member FROM \(owners: estimated) m) AND app_version = \(version) AND \("day", in: plan.days)
                        UNION ALL
                        SELECT group_id, sketch FROM group_version_hourly
                        WHERE group_id IN (SELECT member FROM \(owners: estimated) m) AND app_version = \(version)
                          AND ((\("hour", in: plan.hoursHead)) OR (\("hour", in: plan.hoursTail)))
                    ) x ON x.group_id = o.member GROUP BY o.owner
                    """
                ]
            }
            var sketches: [Int64: DeviceSketch] = [:]
            for query in queries {
                let rows = try await connection.query(query, logger: logger)
                for try await (id, bytes) in rows.decode((Int64, ByteBuffer).self) {
                    sketches[id, default: DeviceSketch()].merge(encoded: bytes.readableBytesView)
                }
            }
            for (id, sketch) in sketches { out[id] = sketch.estimate }
        }
        return out
    }

    /// The groups of `ids` with more than `limit` reports in all, a merge target's members included.
    func groupsOver(_ limit: Int64, ids: [Int64]) async throws -> [Int64] {
        let rows = try await connection.query(
            """
            SELECT o.owner FROM \(owners: ids) o JOIN crash_groups g ON g.id = o.member
            GROUP BY o.owner HAVING sum(g.report_count) > \(limit)
            """, logger: logger)
        var out: [Int64] = []
        for try await id in rows.decode(Int64.self) { out.append(id) }
        return out
    }

    /// Hourly counts of one group over `window`, keyed by hour start; with `environments`,
    /// of its reports in those environments only (from `group_environment_hours`).
    func groupHistogram(group: Int64, window: TimeWindow, environments: [String]) async throws -> [Date: Int64] {
        let plan = window.hourPlan
        // One row, the hours as two arrays (a row per hour cost a row-stream step each).
        let rows = try await connection.query(
            """
            SELECT array_agg(t), array_agg(n) FROM (
                SELECT t, sum(n)::bigint AS n FROM (
                    SELECT hour AS t, count AS n FROM group_version_hourly
                    WHERE cardinality(\(environments)::text[]) = 0
                      AND group_id = ANY(\(members: group)) AND app_version = '' AND \("hour", in: plan.hoursHead)
                    UNION ALL
                    SELECT m.day + e.hour * interval '1 hour', e.count
                    FROM group_environment_hours m CROSS JOIN LATERAL crashguard_model_hours(m.hours) e
                    WHERE cardinality(\(environments)::text[]) > 0 AND m.environment = ANY(\(environments)::text[])
                      AND m.group_id = ANY(\(members: group)) AND \(dayHoursIn: [plan.hoursHead])
                    UNION ALL
                    SELECT date_trunc('hour', ts), 1 FROM reports WHERE group_id = ANY(\(members: group))
                      AND ((\("ts", in: plan.rawHead)) OR (\("ts", in: plan.rawTail)))
                      AND \(environmentFilter: environments)
                ) x GROUP BY t
            ) h
            """, logger: logger)
        var out: [Date: Int64] = [:]
        for try await (times, counts) in rows.decode(([Date]?, [Int64]?).self) {
            out = Dictionary(zip(times ?? [], counts ?? []), uniquingKeysWith: +)
        }
        return out
    }

    /// The environments the project has reports at or after `since` in, by name (at most
    /// 100): its groups' 'environment' facets whose last report is kept, read through
    /// `group_facets_rank`.
    ///
    /// The names are walked one index probe each (the next name after the last), and each is
    /// kept when one of its facets is recent enough, found among its largest groups first: a
    /// `DISTINCT` over the facets read one row per group and environment, 60,000 rows and
    /// 140 ms of every dashboard list page at 20,000 groups, for three names.
    func environments(project: Int64, since: Date) async throws -> [String] {
        let rows = try await connection.query(
            """
            WITH RECURSIVE v AS (
                (SELECT value FROM group_facets WHERE project_id = \(project) AND facet = 'environment' ORDER BY value LIMIT 1)
                UNION ALL
                SELECT (SELECT f.value FROM group_facets f WHERE f.project_id = \(project) AND f.facet = 'environment' AND f.value > v.value
                        ORDER BY f.value LIMIT 1)
                FROM v WHERE v.value IS NOT NULL
            )
            SELECT value FROM v
            WHERE value IS NOT NULL AND EXISTS (
                SELECT 1 FROM group_facets f
                WHERE f.project_id = \(project) AND f.facet = 'environment' AND f.value = v.value AND f.last_seen >= \(since))
            ORDER BY value LIMIT 100
            """, logger: logger)
        var out: [String] = []
        for try await name in rows.decode(String.self) { out.append(name) }
        return out
    }

    /// A group's `firstSeen`/`lastSeen` over its reports in `environments` (its 'environment'
    /// facets), by group; groups with no report there are left out.
    func environmentTimes(ids: [Int64], environments: [String]) async throws -> [Int64: (first: Date, last: Date)] {
        let rows = try await connection.query(
            """
            SELECT o.owner, min(first_seen), max(last_seen) FROM \(owners: ids) o
            JOIN group_facets f ON f.group_id = o.member AND facet = 'environment' AND value = ANY(\(environments)::text[])
            GROUP BY o.owner
            """, logger: logger)
        var out: [Int64: (Date, Date)] = [:]
        for try await (id, first, last) in rows.decode((Int64, Date, Date).self) { out[id] = (first, last) }
        return out
    }

    /// Top 10 versions, OS names, models and environments of one group over `window` (empty
    /// values left out); with `environments`, of its reports in those environments.
    func breakdown(group: Int64, window: TimeWindow, environments: [String]) async throws -> Breakdown {
        // Versions: whole days and edge hours of the per-version rollups; OS and environments:
        // whole days of group_daily and edge hours of group_hourly; models: the counts of whole
        // days of group_environment_model_daily and the hours of its edge days' rows, every
        // environment's or those asked. With environments, versions come from
        // group_daily/group_hourly too (keyed by environment). Sub-hour edges: raw reports.
        let hourly = window.hourPlan
        let versions = window.subtractivePlan
        let daily = window.plan
        let all = environments.isEmpty
        let rows = try await connection.query(
            """
            SELECT dim, value, n FROM (
                SELECT dim, value, sum(n)::bigint AS n,
                       row_number() OVER (PARTITION BY dim ORDER BY sum(n) DESC, value) AS rank
                FROM (
                    SELECT 'v' AS dim, app_version AS value, count AS n FROM group_version_daily
                    WHERE \(all) AND group_id = ANY(\(members: group)) AND app_version <> '' AND \("day", in: versions.days)
                    UNION ALL
                    SELECT 'v', app_version, count * CASE WHEN \("hour", in: versions.head.range) THEN \(versions.head.sign) ELSE \(versions.tail.sign) END
                    FROM group_version_hourly
                    WHERE \(all) AND group_id = ANY(\(members: group)) AND app_version <> ''
                      AND (\("hour", in: versions.head.range) OR \("hour", in: versions.tail.range))
                    UNION ALL
                    SELECT d.dim, d.value, g.count FROM group_daily g
                    CROSS JOIN LATERAL (VALUES ('v', g.app_version), ('o', g.os), ('e', g.environment)) AS d(dim, value)
                    WHERE g.group_id = ANY(\(members: group)) AND \("g.day", in: daily.days) AND \(environmentFilter: environments)
                      AND (d.dim <> 'v' OR NOT \(all))
                    UNION ALL
                    SELECT d.dim, d.value, g.count FROM group_hourly g
                    CROSS JOIN LATERAL (VALUES ('v', g.app_version), ('o', g.os), ('e', g.environment)) AS d(dim, value)
                    WHERE g.group_id = ANY(\(members: group)) AND (\("g.hour", in: daily.hoursHead) OR \("g.hour", in: daily.hoursTail))
                      AND \(environmentFilter: environments) AND (d.dim <> 'v' OR NOT \(all))
                    UNION ALL
                    SELECT 'm', model, count FROM group_environment_model_daily
                    WHERE group_id = ANY(\(members: group)) AND \(environmentFilter: environments) AND \("day", in: daily.days)
                    UNION ALL
                    SELECT 'm', m.model, e.count FROM group_environment_model_daily m CROSS JOIN LATERAL crashguard_model_hours(m.hours) e
                    WHERE m.group_id = ANY(\(members: group)) AND \(environmentFilter: environments)
                      AND \(dayHoursIn: [daily.hoursHead, daily.hoursTail])
                    UNION ALL
                    SELECT d.dim, d.value, 1 FROM reports r
                    CROSS JOIN LATERAL (VALUES ('v', r.app_version), ('o', COALESCE(r.os, '')), ('m', COALESCE(r.model, '')),
                                               ('e', r.environment)) AS d(dim, value)
                    WHERE r.group_id = ANY(\(members: group)) AND ((\("r.ts", in: hourly.rawHead)) OR (\("r.ts", in: hourly.rawTail)))
                      AND \(environmentFilter: environments)
                ) x WHERE value <> '' GROUP BY dim, value HAVING sum(n) > 0
            ) y WHERE rank <= 10 ORDER BY dim, rank
            """, logger: logger)
        var result = Breakdown(versions: [], os: [], models: [], environments: [])
        for try await (dim, value, n) in rows.decode((String, String, Int64).self) {
            let entry = ValueCount(value: value, count: n)
            switch dim {
            case "v": result.versions.append(entry)
            case "o": result.os.append(entry)
            case "e": result.environments.append(entry)
            default: result.models.append(entry)
            }
        }
        return result
    }

    /// A group's stored reports, newest first (client time, then id), after `cursor`.
    func reports(
        project: Int64, group: Int64, after cursor: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool,
        environments: [String]
    ) async throws -> [(report: StoredReport, micros: Int64)] {
        let afterMicros = cursor?.micros
        let afterID = cursor?.id ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        let rows = try await connection.query(
            """
            SELECT r.* FROM unnest(\(members: group)) AS m(g) CROSS JOIN LATERAL (
                -- Newest first per member (reports_group_ts), then merged: a merge target lists its members' reports too.
                SELECT id, ts, received_at, kind, reason, CASE WHEN \(includeStack) THEN COALESCE(stack, stack_jsonb::text) END, fatal,
                       app_id, app_version, app_build, os, os_version, model, device_id,
                       COALESCE(fingerprint, fingerprint_jsonb::text), COALESCE(context, context_jsonb::text),
                       (extract(epoch FROM ts) * 1000000)::bigint, environment, scrubbed
                FROM reports WHERE group_id = m.g AND project_id = \(project) AND \(environmentFilter: environments)
                  AND (\(afterMicros)::bigint IS NULL OR (ts, id) < ('epoch'::timestamptz + \(afterMicros) * interval '1 microsecond', \(afterID)))
                ORDER BY ts DESC, id DESC LIMIT \(limit)
            ) r
            ORDER BY r.ts DESC, r.id DESC LIMIT \(limit)
            """, logger: logger)
        var out: [(StoredReport, Int64)] = []
        let decoder = JSONDecoder()
        func strings(_ json: String?) throws -> [String]? { try json.map { try decoder.decode([String].self, from: Data($0.utf8)) } }
        for try await row in rows {
            let (
                id, timestamp, receivedAt, kind, reason, stack, fatal, appID, appVersion, appBuild, os, osVersion, model, deviceID,
                fingerprint, context, micros, environment, scrubbed
            ) = try row.decode(
                (
                    UUID, Date, Date, String, String, String?, Bool?, String, String, String?, String?, String?, String?, String?, String?,
                    String?, Int64, String, Bool
                ).self)
            let device: DeviceInfo? =
                os == nil && osVersion == nil && model == nil && deviceID == nil
                ? nil : DeviceInfo(os: os, osVersion: osVersion, model: model, id: deviceID)
            let report = StoredReport(
                id: id.uuidString.lowercased(), timestamp: timestamp, kind: kind, reason: reason, stack: try strings(stack),
                fatal: fatal, app: AppInfo(id: appID, version: appVersion, build: appBuild), device: device,
                fingerprint: try strings(fingerprint),
                context: try context.map { try decoder.decode([String: String].self, from: Data($0.utf8)) },
                receivedAt: receivedAt, environment: environment, scrubbed: scrubbed)
            out.append((report, micros))
        }
        return out
    }

    /// Groups whose first report ever is of `version` (and `app`), ignored ones left out. A merge
    /// target's first report is the earliest of it and its members, which are never listed.
    /// The version's facet rows are found by `group_facets_rank` (project, facet, value): without
    /// the project there, PostgreSQL scans every facet row of the database.
    func groupsIntroduced(project: Int64, version: String, app: String?, window: TimeWindow) async throws -> [Int64] {
        let rows = try await connection.query(
            """
            SELECT DISTINCT o.id FROM crash_groups g
            JOIN group_facets fv ON fv.group_id = g.id AND fv.project_id = \(project) AND fv.facet = 'version' AND fv.value = \(version)
            JOIN crash_groups o ON o.id = COALESCE(g.merged_into, g.id)
            WHERE g.project_id = \(project) AND o.status <> 'ignored' AND fv.first_seen = g.first_seen
              AND NOT EXISTS (SELECT 1 FROM crash_groups x WHERE (x.id = o.id OR x.merged_into = o.id) AND x.first_seen < g.first_seen)
              AND fv.first_seen < \(window.to)
              AND (fv.last_seen >= \(window.from) OR g.merged_into IS NOT NULL OR EXISTS (SELECT 1 FROM crash_groups x WHERE x.merged_into = g.id))
              AND (\(app)::text IS NULL OR EXISTS (
                  SELECT 1 FROM group_facets fa
                  WHERE fa.group_id = g.id AND fa.facet = 'app' AND fa.value = \(app) AND fa.first_seen = g.first_seen))
            """, logger: logger)
        var ids: [Int64] = []
        for try await id in rows.decode(Int64.self) { ids.append(id) }
        return ids
    }
}
