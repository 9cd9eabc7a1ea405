import CrashWire
import Foundation
import Logging
import PostgresNIO

/// A crash group's stored row.
struct GroupRow: Sendable {
    var id: Int64
    var signature: String
    var kind: String
    var groupingVersion: String
    var title: String
    var firstSeen: Date
    var lastSeen: Date
    var status: GroupStatus
    var fatal: Bool
    var resolvedIn: String?
}

extension CrashDatabase {
    /// Runs `body` in one read-only REPEATABLE READ transaction: every statement sees the
    /// same snapshot, so counts from several rollups and `pg_current_snapshot()` agree.
    /// On the standby when one is configured and usable, else on the primary's query pool
    /// (`withReader`).
    ///
    /// Both pools' sessions carry the statement timeout (``QueryTimeouts``): a statement that
    /// hits it is rolled back and answered 503 with `Retry-After` (``queryTimedOut``), never
    /// 500.
    func withReadSnapshot<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await withReader { client in
                try await client.withConnection { connection in
                    try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
                    do {
                        let result = try await body(connection)
                        try await connection.query("COMMIT", logger: logger)
                        return result
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
            }
        } catch  where sqlState(error) == "57014" {
            logger.warning("read query timed out", metadata: ["error.message": "\(error)"])
            throw Self.queryTimedOut
        }
    }

    /// The answer to a read whose statement ran into the query timeout (SQLSTATE 57014).
    static let queryTimedOut = APIError.unavailable(
        "query timeout: the query took longer than the server allows; retry later, or ask for a shorter window or a coarser interval",
        retryAfter: 5)

    /// Reports per group in `window` under `filters`, read from the rollups (whole days
    /// from `group_daily`, edge hours from `group_hourly`, sub-hour edges from raw reports).
    ///
    /// - Parameters:
    ///   - ids: only these groups; nil for every group of the project.
    ///   - snapshot: count as of this `pg_snapshot`: reports committed after it are subtracted.
    /// - Returns: groups with a positive count that pass the kind and status filters.
    func windowCounts(
        project: Int64, ids: [Int64]?, window: TimeWindow, filters f: GroupFilters, snapshot: String?,
        on connection: PostgresConnection
    ) async throws -> [Int64: Int64] {
        let plan = window.plan
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        let (h0, h1) = plan.hours[0], (h2, h3) = plan.hours[1]
        let (d0, d1) = plan.days
        // Without app/os filters, whole hours and days come from the per-version rollups: a
        // few rows per group and day instead of one per app, version and OS.
        let scoped = f.app == nil && f.os == nil
        let version = f.version ?? ""
        let sp = window.subtractivePlan
        let (sd0, sd1) = sp.days
        let (e0, e1, s0) = sp.edges[0], (e2, e3, s1) = sp.edges[1]
        let rows = try await connection.query(
            """
            SELECT c.group_id, c.n FROM (
                SELECT group_id, sum(n)::bigint AS n FROM (
                    SELECT group_id, count AS n FROM group_version_daily
                    WHERE \(scoped) AND app_version = \(version) AND day >= \(sd0) AND day < \(sd1)
                      AND (group_id = ANY(\(ids)::bigint[])
                           OR (\(ids)::bigint[] IS NULL AND group_id IN (SELECT id FROM crash_groups WHERE project_id = \(project))))
                    UNION ALL
                    SELECT group_id, count * CASE WHEN hour >= \(e0) AND hour < \(e1) THEN \(s0) ELSE \(s1) END
                    FROM group_version_hourly
                    WHERE \(scoped) AND app_version = \(version) AND (hour >= \(e0) AND hour < \(e1) OR hour >= \(e2) AND hour < \(e3))
                      AND (group_id = ANY(\(ids)::bigint[])
                           OR (\(ids)::bigint[] IS NULL AND group_id IN (SELECT id FROM crash_groups WHERE project_id = \(project))))
                    UNION ALL
                    SELECT group_id, count AS n FROM group_daily
                    WHERE NOT \(scoped) AND project_id = \(project) AND day >= \(d0) AND day < \(d1)
                      AND (\(ids)::bigint[] IS NULL OR group_id = ANY(\(ids)::bigint[]))
                      AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                      AND (\(f.os)::text IS NULL OR os = \(f.os))
                    UNION ALL
                    SELECT group_id, count FROM group_hourly
                    WHERE NOT \(scoped) AND project_id = \(project) AND ((hour >= \(h0) AND hour < \(h1)) OR (hour >= \(h2) AND hour < \(h3)))
                      AND (\(ids)::bigint[] IS NULL OR group_id = ANY(\(ids)::bigint[]))
                      AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                      AND (\(f.os)::text IS NULL OR os = \(f.os))
                    UNION ALL
                    SELECT group_id, 1 FROM reports
                    WHERE project_id = \(project) AND ((ts >= \(r0) AND ts < \(r1)) OR (ts >= \(r2) AND ts < \(r3)))
                      AND (\(ids)::bigint[] IS NULL OR group_id = ANY(\(ids)::bigint[]))
                      AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                      AND (\(f.os)::text IS NULL OR COALESCE(os, '') = \(f.os))
                    UNION ALL
                    SELECT group_id, -1 FROM reports
                    WHERE \(snapshot)::text IS NOT NULL AND project_id = \(project)
                      AND xact >= pg_snapshot_xmin(\(snapshot)::pg_snapshot)
                      AND NOT pg_visible_in_snapshot(xact, \(snapshot)::pg_snapshot)
                      AND ts >= \(window.from) AND ts < \(window.to)
                      AND (\(ids)::bigint[] IS NULL OR group_id = ANY(\(ids)::bigint[]))
                      AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                      AND (\(f.os)::text IS NULL OR COALESCE(os, '') = \(f.os))
                ) x GROUP BY group_id
            ) c JOIN crash_groups g ON g.id = c.group_id
            WHERE c.n > 0 AND (\(f.kind)::text IS NULL OR g.kind = \(f.kind))
              AND CASE WHEN \(f.status)::text IS NULL THEN g.status <> 'ignored' ELSE g.status = \(f.status) END
            """, logger: logger)
        var counts: [Int64: Int64] = [:]
        for try await (id, n) in rows.decode((Int64, Int64).self) { counts[id] = n }
        return counts
    }

    /// The next candidates for a count-sorted page, by an upper bound of their window count
    /// (all-time count, or all-time count for the filtered version/os/app), highest first;
    /// only bounds of at least `atLeast` when it is set.
    func countCandidates(
        project: Int64, window: TimeWindow, filters f: GroupFilters, after: (bound: Int64, id: Int64)?, atLeast: Int64?,
        limit: Int,
        on connection: PostgresConnection
    ) async throws -> [(id: Int64, bound: Int64)] {
        let facet: (String, String)? =
            f.version.map { ("version", $0) } ?? f.os.map { ("os", $0) } ?? f.app.map { ("app", $0) }
        let lb = after?.bound, lid = after?.id ?? 0
        let rows: PostgresRowSequence
        if let (name, value) = facet {
            rows = try await connection.query(
                """
                SELECT f.group_id, f.count FROM group_facets f JOIN crash_groups g ON g.id = f.group_id
                WHERE f.project_id = \(project) AND f.facet = \(name) AND f.value = \(value)
                  AND f.last_seen >= \(window.from) AND f.first_seen < \(window.to)
                  AND (\(lb)::bigint IS NULL OR f.count < \(lb) OR (f.count = \(lb) AND f.group_id > \(lid)))
                  AND (\(atLeast)::bigint IS NULL OR f.count >= \(atLeast))
                  AND (\(f.kind)::text IS NULL OR g.kind = \(f.kind))
                  AND CASE WHEN \(f.status)::text IS NULL THEN g.status <> 'ignored' ELSE g.status = \(f.status) END
                ORDER BY f.count DESC, f.group_id LIMIT \(limit)
                """, logger: logger)
        } else {
            rows = try await connection.query(
                """
                SELECT id, report_count FROM crash_groups
                WHERE project_id = \(project) AND last_seen >= \(window.from) AND first_seen < \(window.to)
                  AND (\(lb)::bigint IS NULL OR report_count < \(lb) OR (report_count = \(lb) AND id > \(lid)))
                  AND (\(atLeast)::bigint IS NULL OR report_count >= \(atLeast))
                  AND (\(f.kind)::text IS NULL OR kind = \(f.kind))
                  AND CASE WHEN \(f.status)::text IS NULL THEN status <> 'ignored' ELSE status = \(f.status) END
                ORDER BY report_count DESC, id LIMIT \(limit)
                """, logger: logger)
        }
        var out: [(Int64, Int64)] = []
        for try await (id, bound) in rows.decode((Int64, Int64).self) { out.append((id, bound)) }
        return out
    }

    /// The next groups by `lastSeen` or `firstSeen` (descending, ties by id ascending) after
    /// `after` (microseconds, id), with the time in microseconds.
    func timeCandidates(
        project: Int64, sort: GroupSort, window: TimeWindow, filters f: GroupFilters, after: (Int64, Int64)?, limit: Int,
        on connection: PostgresConnection
    ) async throws -> [(id: Int64, key: Int64)] {
        let k = after?.0, kid = after?.1 ?? 0
        let column = sort == .firstSeen ? "first_seen" : "last_seen"
        let rows = try await connection.query(
            """
            SELECT id, (extract(epoch FROM \(unescaped: column)) * 1000000)::bigint FROM crash_groups
            WHERE project_id = \(project) AND last_seen >= \(window.from) AND first_seen < \(window.to)
              AND (\(k)::bigint IS NULL OR \(unescaped: column) < 'epoch'::timestamptz + \(k) * interval '1 microsecond'
                   OR (\(unescaped: column) = 'epoch'::timestamptz + \(k) * interval '1 microsecond' AND id > \(kid)))
              AND (\(f.kind)::text IS NULL OR kind = \(f.kind))
              AND CASE WHEN \(f.status)::text IS NULL THEN status <> 'ignored' ELSE status = \(f.status) END
            ORDER BY \(unescaped: column) DESC, id LIMIT \(limit)
            """, logger: logger)
        var out: [(Int64, Int64)] = []
        for try await (id, key) in rows.decode((Int64, Int64).self) { out.append((id, key)) }
        return out
    }

    /// `lastSeen`/`firstSeen` (microseconds) as of `snapshot`, for the project's groups whose
    /// value was moved by reports committed after it (the others keep their current value);
    /// nil for a group that had no report then.
    func timeKeysAsOf(
        project: Int64, sort: GroupSort, snapshot: String, on connection: PostgresConnection
    ) async throws -> [Int64: Int64?] {
        let last = sort == .lastSeen
        let rows = try await connection.query(
            """
            WITH delta AS (
                SELECT group_id, max(ts) AS hi, min(ts) AS lo FROM reports
                WHERE project_id = \(project)
                  AND xact >= pg_snapshot_xmin(\(snapshot)::pg_snapshot) AND NOT pg_visible_in_snapshot(xact, \(snapshot)::pg_snapshot)
                GROUP BY group_id
            )
            SELECT g.id, (extract(epoch FROM CASE WHEN \(last) THEN
                    (SELECT max(r.ts) FROM reports r WHERE r.group_id = g.id AND pg_visible_in_snapshot(r.xact, \(snapshot)::pg_snapshot))
                ELSE
                    (SELECT min(r.ts) FROM reports r WHERE r.group_id = g.id AND pg_visible_in_snapshot(r.xact, \(snapshot)::pg_snapshot))
                END) * 1000000)::bigint
            FROM crash_groups g JOIN delta d ON d.group_id = g.id
            WHERE CASE WHEN \(last) THEN d.hi >= g.last_seen ELSE d.lo <= g.first_seen END
            """, logger: logger)
        var out: [Int64: Int64?] = [:]
        for try await (id, key) in rows.decode((Int64, Int64?).self) { out[id] = key }
        return out
    }

    /// Keeps a list's first-page snapshot for its cursors; returns its id.
    func saveListSnapshot(_ snapshot: String) async throws -> Int64 {
        let rows = try await client.query(
            "INSERT INTO list_snapshots (snapshot) VALUES (\(snapshot)::pg_snapshot) RETURNING id", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw IngestStoreError(description: "list snapshot not saved")
    }

    /// A saved list snapshot as text; nil when unknown or pruned (see ``pruneListSnapshots(before:)``).
    ///
    /// Snapshots are saved on the primary. On a standby that has not replayed the row yet, or
    /// whose own snapshot does not yet see everything the saved one holds as finished, this
    /// throws ``ReaderBehind`` and the page is read on the primary instead.
    func listSnapshot(_ id: Int64, on connection: PostgresConnection) async throws -> String? {
        let rows = try await connection.query(
            """
            SELECT s.snapshot::text, r.standby,
                   NOT r.standby OR pg_snapshot_xmax(s.snapshot) <= pg_snapshot_xmin(pg_current_snapshot())
            FROM (SELECT pg_is_in_recovery() AS standby) r LEFT JOIN list_snapshots s ON s.id = \(id)
            """, logger: logger)
        for try await (text, standby, covered) in rows.decode((String?, Bool, Bool?).self) {
            if text == nil, standby { throw ReaderBehind() }
            if covered == false { throw ReaderBehind() }
            return text
        }
        return nil
    }

    /// Deletes list snapshots saved before `cutoff`; returns how many.
    func pruneListSnapshots(before cutoff: Date) async throws -> Int {
        let rows = try await client.query(
            "WITH d AS (DELETE FROM list_snapshots WHERE created_at < \(cutoff) RETURNING 1) SELECT count(*)::bigint FROM d",
            logger: logger)
        for try await n in rows.decode(Int64.self) { return Int(n) }
        return 0
    }

    /// Group rows by id.
    func groupRows(project: Int64, ids: [Int64], on connection: PostgresConnection) async throws -> [Int64: GroupRow] {
        let rows = try await connection.query(
            """
            SELECT id, signature, kind, grouping_version, title, first_seen, last_seen, status, fatal, resolved_in
            FROM crash_groups WHERE project_id = \(project) AND id = ANY(\(ids))
            """, logger: logger)
        var out: [Int64: GroupRow] = [:]
        for try await (id, signature, kind, version, title, first, last, status, fatal, resolvedIn) in rows.decode(
            (Int64, String, String, String, String, Date, Date, GroupStatus, Bool, String?).self)
        {
            out[id] = GroupRow(
                id: id, signature: signature, kind: kind, groupingVersion: version, title: title, firstSeen: first,
                lastSeen: last,
                status: status, fatal: fatal, resolvedIn: resolvedIn)
        }
        return out
    }

    /// Every app version seen per group, highest first.
    func versions(ids: [Int64], on connection: PostgresConnection) async throws -> [Int64: [String]] {
        // One row per group (a row per version cost a row-stream step each).
        let rows = try await connection.query(
            "SELECT group_id, array_agg(value) FROM group_facets WHERE group_id = ANY(\(ids)) AND facet = 'version' GROUP BY group_id",
            logger: logger)
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
    /// ``exactDeviceLimit`` reports in the window, and whenever an `app` or `os` filter is
    /// set; otherwise estimated from the HyperLogLog sketches of the whole hours and days the
    /// window touches (about 3 % standard error), for all versions or the filtered one.
    func deviceCounts(
        project: Int64, counts: [Int64: Int64], window: TimeWindow, filters f: GroupFilters, on connection: PostgresConnection
    ) async throws -> [Int64: Int64] {
        let sketchable = f.app == nil && f.os == nil
        var exact: [Int64] = [], estimated: [Int64] = []
        for (id, n) in counts {
            if sketchable && n > Self.exactDeviceLimit { estimated.append(id) } else { exact.append(id) }
        }
        var out: [Int64: Int64] = [:]
        if !exact.isEmpty {
            let rows = try await connection.query(
                """
                SELECT group_id, count(DISTINCT device_id)::bigint FROM reports
                WHERE project_id = \(project) AND group_id = ANY(\(exact)) AND ts >= \(window.from) AND ts < \(window.to)
                  AND device_id <> ''
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(f.version)::text IS NULL OR app_version = \(f.version))
                  AND (\(f.os)::text IS NULL OR COALESCE(os, '') = \(f.os))
                GROUP BY group_id
                """, logger: logger)
            for try await (id, n) in rows.decode((Int64, Int64).self) { out[id] = n }
        }
        if !estimated.isEmpty {
            let plan = TimeWindow(from: TimeWindow.floor(window.from, TimeWindow.hour), to: TimeWindow.ceil(window.to, TimeWindow.hour)).plan
            let (h0, h1) = plan.hours[0], (h2, h3) = plan.hours[1]
            let (d0, d1) = plan.days
            let version = f.version ?? ""
            // One row per group: its sketches concatenated (a list of entries in any order is
            // a valid stored form to merge). A row per sketch cost a row-stream step each, about
            // 10 ms for the top 25 groups of 7 days at 10 M reports.
            let rows = try await connection.query(
                """
                SELECT group_id, string_agg(sketch, ''::bytea) FROM (
                    SELECT group_id, sketch FROM group_version_daily
                    WHERE group_id = ANY(\(estimated)) AND app_version = \(version) AND day >= \(d0) AND day < \(d1)
                    UNION ALL
                    SELECT group_id, sketch FROM group_version_hourly
                    WHERE group_id = ANY(\(estimated)) AND app_version = \(version)
                      AND ((hour >= \(h0) AND hour < \(h1)) OR (hour >= \(h2) AND hour < \(h3)))
                ) x GROUP BY group_id
                """, logger: logger)
            for try await (id, bytes) in rows.decode((Int64, ByteBuffer).self) {
                out[id] = DeviceSketch(encoded: bytes.readableBytesView).estimate
            }
        }
        return out
    }

    /// Hourly counts of one group over `window`, keyed by hour start.
    func groupHistogram(group: Int64, window: TimeWindow, on connection: PostgresConnection) async throws -> [Date: Int64] {
        let plan = window.hourPlan
        // One row, the hours as two arrays (a row per hour cost a row-stream step each).
        let rows = try await connection.query(
            """
            SELECT array_agg(t), array_agg(n) FROM (
                SELECT t, sum(n)::bigint AS n FROM (
                    SELECT hour AS t, count AS n FROM group_version_hourly
                    WHERE group_id = \(group) AND app_version = '' AND hour >= \(plan.hours[0].0) AND hour < \(plan.hours[0].1)
                    UNION ALL
                    SELECT date_trunc('hour', ts), 1 FROM reports WHERE group_id = \(group)
                      AND ((ts >= \(plan.raw[0].0) AND ts < \(plan.raw[0].1)) OR (ts >= \(plan.raw[1].0) AND ts < \(plan.raw[1].1)))
                ) x GROUP BY t
            ) h
            """, logger: logger)
        var out: [Date: Int64] = [:]
        for try await (times, counts) in rows.decode(([Date]?, [Int64]?).self) {
            out = Dictionary(zip(times ?? [], counts ?? []), uniquingKeysWith: +)
        }
        return out
    }

    /// Top 10 versions, OS names and models of one group over `window` (empty values left out).
    func breakdown(group: Int64, window: TimeWindow, on connection: PostgresConnection) async throws -> Breakdown {
        let plan = window.hourPlan
        let (h0, h1) = plan.hours[0]
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        // Versions: whole days and edge hours of the per-version rollups; OS: whole days of
        // group_daily and edge hours of group_hourly; models: hours (no daily table).
        let sp = window.subtractivePlan
        let (sd0, sd1) = sp.days
        let (s0a, s0b, s0) = sp.edges[0], (s1a, s1b, s1) = sp.edges[1]
        let days = window.plan
        let (d0, d1) = days.days
        let (e0, e1) = days.hours[0], (e2, e3) = days.hours[1]
        let rows = try await connection.query(
            """
            SELECT dim, value, n FROM (
                SELECT dim, value, sum(n)::bigint AS n,
                       row_number() OVER (PARTITION BY dim ORDER BY sum(n) DESC, value) AS rank
                FROM (
                    SELECT 'v' AS dim, app_version AS value, count AS n FROM group_version_daily
                    WHERE group_id = \(group) AND app_version <> '' AND day >= \(sd0) AND day < \(sd1)
                    UNION ALL
                    SELECT 'v', app_version, count * CASE WHEN hour >= \(s0a) AND hour < \(s0b) THEN \(s0) ELSE \(s1) END
                    FROM group_version_hourly
                    WHERE group_id = \(group) AND app_version <> '' AND (hour >= \(s0a) AND hour < \(s0b) OR hour >= \(s1a) AND hour < \(s1b))
                    UNION ALL
                    SELECT 'o', os, count FROM group_daily WHERE group_id = \(group) AND day >= \(d0) AND day < \(d1)
                    UNION ALL
                    SELECT 'o', os, count FROM group_hourly
                    WHERE group_id = \(group) AND (hour >= \(e0) AND hour < \(e1) OR hour >= \(e2) AND hour < \(e3))
                    UNION ALL
                    SELECT 'm', model, count FROM group_model_hourly WHERE group_id = \(group) AND hour >= \(h0) AND hour < \(h1)
                    UNION ALL
                    SELECT d.dim, d.value, 1 FROM reports r
                    CROSS JOIN LATERAL (VALUES ('v', r.app_version), ('o', COALESCE(r.os, '')), ('m', COALESCE(r.model, ''))) AS d(dim, value)
                    WHERE r.group_id = \(group) AND ((r.ts >= \(r0) AND r.ts < \(r1)) OR (r.ts >= \(r2) AND r.ts < \(r3)))
                ) x WHERE value <> '' GROUP BY dim, value HAVING sum(n) > 0
            ) y WHERE rank <= 10 ORDER BY dim, rank
            """, logger: logger)
        var result = Breakdown(versions: [], os: [], models: [])
        for try await (dim, value, n) in rows.decode((String, String, Int64).self) {
            let entry = ValueCount(value: value, count: n)
            switch dim {
            case "v": result.versions.append(entry)
            case "o": result.os.append(entry)
            default: result.models.append(entry)
            }
        }
        return result
    }

    /// A group's stored reports, newest first (client time, then id), after `cursor`.
    func reports(
        project: Int64, group: Int64, after cursor: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool,
        on connection: PostgresConnection
    ) async throws -> [(report: StoredReport, micros: Int64)] {
        let k = cursor?.micros
        let u = cursor?.id ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        let rows = try await connection.query(
            """
            SELECT id, ts, received_at, kind, reason, CASE WHEN \(includeStack) THEN COALESCE(stack, stack_jsonb::text) END, fatal,
                   app_id, app_version, app_build, os, os_version, model, device_id,
                   COALESCE(fingerprint, fingerprint_jsonb::text), COALESCE(context, context_jsonb::text),
                   (extract(epoch FROM ts) * 1000000)::bigint
            FROM reports WHERE group_id = \(group) AND project_id = \(project)
              AND (\(k)::bigint IS NULL OR (ts, id) < ('epoch'::timestamptz + \(k) * interval '1 microsecond', \(u)))
            ORDER BY ts DESC, id DESC LIMIT \(limit)
            """, logger: logger)
        var out: [(StoredReport, Int64)] = []
        let decoder = JSONDecoder()
        for try await row in rows {
            let all = try row.decode(
                (
                    UUID, Date, Date, String, String, String?, Bool?, String, String, String?, String?, String?, String?, String?, String?, String?,
                    Int64
                ).self)
            let device: DeviceInfo? =
                all.10 == nil && all.11 == nil && all.12 == nil && all.13 == nil
                ? nil : DeviceInfo(os: all.10, osVersion: all.11, model: all.12, id: all.13)
            let report = StoredReport(
                id: all.0.uuidString.lowercased(), timestamp: all.1, kind: all.3, reason: all.4,
                stack: try all.5.map { try decoder.decode([String].self, from: Data($0.utf8)) },
                fatal: all.6, app: AppInfo(id: all.7, version: all.8, build: all.9), device: device,
                fingerprint: try all.14.map { try decoder.decode([String].self, from: Data($0.utf8)) },
                context: try all.15.map { try decoder.decode([String: String].self, from: Data($0.utf8)) },
                receivedAt: all.2)
            out.append((report, all.16))
        }
        return out
    }

    /// Sets a group's status; returns false when the project has no such group.
    func triage(project: Int64, group: Int64, status: GroupStatus, resolvedIn: String?) async throws -> Bool {
        let rows = try await client.query(
            """
            UPDATE crash_groups SET status = \(status), resolved_in = \(resolvedIn)
            WHERE id = \(group) AND project_id = \(project) RETURNING id
            """, logger: logger)
        var found = false
        for try await _ in rows.decode(Int64.self) { found = true }
        if found { try await noteWrite() }
        return found
    }

    /// Project-wide counts per bucket (`hour` or `day`) and key (`kind`, `version` or none).
    func stats(
        project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int,
        on connection: PostgresConnection
    ) async throws -> [(t: Date, key: String?, n: Int64)] {
        let plan = window.hourPlan
        let (h0, h1) = plan.hours[0]
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        // Only the buckets of the maxSeries + 1 keys of highest total (ties by key, in byte
        // order) leave the database: enough for the caller to keep maxSeries and to know that
        // it cut, without sending every version's buckets (10,000 versions by 2,160 hours).
        let keys = Int64(min(maxSeries, Int(Int32.max) - 1) + 1)
        let rows = try await connection.query(
            """
            WITH b AS (
                SELECT date_trunc(\(unit), t) AS t, key, sum(n)::bigint AS n FROM (
                    SELECT hour AS t, CASE \(groupBy) WHEN 'kind' THEN kind WHEN 'version' THEN app_version END AS key, count AS n
                    FROM project_hourly WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1)
                    UNION ALL
                    SELECT ts, CASE \(groupBy) WHEN 'kind' THEN kind WHEN 'version' THEN app_version END, 1
                    FROM reports WHERE project_id = \(project) AND ((ts >= \(r0) AND ts < \(r1)) OR (ts >= \(r2) AND ts < \(r3)))
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
}
