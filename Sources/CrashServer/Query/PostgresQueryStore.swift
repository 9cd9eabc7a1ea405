import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The query store on the server's PostgreSQL: reads in one read-only snapshot through
/// ``CrashDatabase/withReadSnapshot(_:)`` (the standby when one is usable, else the primary's
/// query pool), writes (list snapshots) on the primary.
struct PostgresQueryStore: QueryStore {
    let database: CrashDatabase

    private var logger: Logger { database.logger }

    /// The project a read token belongs to (``PostgresProjectStore/project(readToken:)``).
    func project(readToken: String) async throws -> ProjectRef? {
        try await PostgresProjectStore(database: database).project(readToken: readToken)
    }

    /// One read-only REPEATABLE READ transaction (``CrashDatabase/withReadSnapshot(_:)``).
    func read<T: Sendable>(_ body: @escaping @Sendable (Reader) async throws -> T) async throws -> T {
        try await database.withReadSnapshot { connection in try await body(Reader(database: database, connection: connection)) }
    }

    /// Waits for the rollup aggregator to fold `project`'s pending reports (``RollupFreshness``),
    /// for at most ``CrashDatabase/rollupWaitBudget``.
    func awaitRollups(project: Int64) async throws {
        try await database.rollupFreshness.awaitFolded(project: project, atMost: database.rollupWaitBudget)
    }

    /// Keeps a list's first-page snapshot for its cursors; returns its id.
    func saveListSnapshot(_ snapshot: String) async throws -> Int64 {
        let rows = try await database.client.query(
            "INSERT INTO list_snapshots (snapshot) VALUES (\(snapshot)::pg_snapshot) RETURNING id", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw QueryStoreError.snapshotNotSaved
    }

    /// Deletes list snapshots saved before `cutoff`; returns how many.
    func pruneListSnapshots(before cutoff: Date) async throws -> Int {
        let rows = try await database.client.query(
            "WITH d AS (DELETE FROM list_snapshots WHERE created_at < \(cutoff) RETURNING 1) SELECT count(*)::bigint FROM d",
            logger: logger)
        for try await n in rows.decode(Int64.self) { return Int(n) }
        return 0
    }

    /// The reads of one snapshot, on its connection. Counts come from the rollups the ingest
    /// transaction keeps (whole days from the daily ones, edge hours from the hourly ones,
    /// sub-hour edges from raw reports: ``TimeWindow/plan``).
    struct Reader: QueryReader {
        let database: CrashDatabase
        let connection: PostgresConnection
        /// What this snapshot was found to hold, kept for its later reads.
        let facts = SnapshotFacts()

        var logger: Logger { database.logger }

        /// The first page's snapshot for its cursors, and the snapshot to count it as of.
        ///
        /// On the primary that is `pg_current_snapshot()`, and the page is counted on current
        /// data (the same thing). On a standby `pg_current_snapshot()` lists no transactions in
        /// progress (PostgreSQL keeps them apart during recovery), so it would claim too much;
        /// the snapshot used instead is `xmin:xmin:` (everything the standby's snapshot sees as
        /// finished below its xmin) and the page is counted as of it, like the pages after it.
        func firstPageSnapshot() async throws -> (snapshot: String, asOf: String?) {
            let rows = try await connection.query(
                """
                SELECT CASE WHEN pg_is_in_recovery() THEN pg_snapshot_xmin(s)::text || ':' || pg_snapshot_xmin(s)::text || ':'
                            ELSE s::text END, pg_is_in_recovery()
                FROM (SELECT pg_current_snapshot() AS s) x
                """, logger: logger)
            for try await (text, standby) in rows.decode((String, Bool).self) { return (text, standby ? text : nil) }
            throw QueryStoreError.noSnapshot
        }

        /// A saved list snapshot as text; nil when unknown or pruned (see
        /// ``PostgresQueryStore/pruneListSnapshots(before:)``).
        ///
        /// Snapshots are saved on the primary. On a standby that has not replayed the row yet, or
        /// whose own snapshot does not yet see everything the saved one holds as finished, this
        /// throws ``ReaderBehind`` and the page is read on the primary instead.
        func listSnapshot(_ id: Int64) async throws -> String? {
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

        /// Reports per group in `window` under `filters`, read from the rollups (whole days
        /// from `group_daily`, edge hours from `group_hourly`, sub-hour edges from raw reports),
        /// in one statement that holds only the reads this window needs (``WindowCountReads``).
        ///
        /// Which rollups depends on the filters' ``RollupLevel``: the per-version rollups when
        /// at most a version narrows the reports; `group_daily`/`group_hourly` for app, OS and
        /// environment; `group_hourly` alone (its `fatal_count`) for `fatal:`; raw reports over the
        /// whole window for `context` terms.
        ///
        /// - Parameters:
        ///   - ids: only these groups; nil for every group of the project.
        ///   - snapshot: count as of this `pg_snapshot`: reports committed after it are subtracted.
        ///
        /// The reports committed but not folded into the rollups yet (their batch's
        /// `rollup_pending` row is still there in this snapshot: ``RollupAggregator``) are counted
        /// from the reports themselves, so that a count holds every report this snapshot sees,
        /// whatever the aggregator has done: a list's later pages, read in later snapshots and
        /// counted as of the first page's, agree with it even when the aggregator folded
        /// between them.
        /// - Returns: groups with a positive count that pass the group filters and terms: for
        ///   `ids: nil`, every group the list with these filters shows (all pages).
        func windowCounts(
            project: Int64, ids: [Int64]?, window: TimeWindow, filters f: GroupFilters, snapshot: String?
        ) async throws -> [Int64: Int64] {
            guard window.from < window.to, ids?.isEmpty != true else { return [:] }
            // The asked groups with the groups merged into them: each counts toward its owner.
            var members: [Int64]?
            if let ids { members = try await memberIDs(ids) }
            let reads = WindowCountReads(
                project: project, members: members, window: window, filters: f,
                pending: try await hasPendingRollups(project: project), snapshot: snapshot)
            let rows = try await connection.query(
                """
                SELECT g.id, sum(c.n)::bigint FROM (
                    SELECT group_id, sum(n)::bigint AS n FROM (
                        \(windowCountRows: reads)
                    ) x GROUP BY group_id
                ) c JOIN crash_groups m ON m.id = c.group_id
                JOIN crash_groups g ON g.id = CASE WHEN m.merged_into IS NULL OR m.id = ANY(\(ids)::bigint[]) THEN m.id ELSE m.merged_into END
                WHERE \(groupFilter: f, alias: "g")
                GROUP BY g.id HAVING sum(c.n) > 0
                """, logger: logger)
            var counts: [Int64: Int64] = [:]
            for try await (id, n) in rows.decode((Int64, Int64).self) { counts[id] = n }
            return counts
        }

        /// Whether `project` has reports the rollups do not hold yet in this snapshot: read
        /// once per snapshot (``SnapshotFacts``), however many counts it makes.
        func hasPendingRollups(project: Int64) async throws -> Bool {
            if let pending = facts.pending(project: project) { return pending }
            let rows = try await connection.query(
                "SELECT EXISTS (SELECT 1 FROM rollup_pending WHERE project_id = \(project))", logger: logger)
            var pending = false
            for try await value in rows.decode(Bool.self) { pending = value }
            facts.setPending(pending, project: project)
            return pending
        }

        /// The next candidates for a count-sorted page, by an upper bound of their window count
        /// (all-time count, or all-time count for the filtered version/os/app), highest first;
        /// only bounds of at least `atLeast` when it is set.
        func countCandidates(
            project: Int64, window: TimeWindow, filters f: GroupFilters, after: (bound: Int64, id: Int64)?, atLeast: Int64?,
            limit: Int
        ) async throws -> [(id: Int64, bound: Int64)] {
            // A facet every counted report has: its all-time count bounds the window count.
            let p = f.reports
            let environment = p.environments.first ?? (p.anyEnvironment.count == 1 ? p.anyEnvironment.first : nil)
            let facet: (String, String)? =
                p.versions.first.map { ("version", $0) } ?? p.oses.first.map { ("os", $0) } ?? f.app.map { ("app", $0) }
                ?? environment.map { ("environment", $0) }
            let afterBound = after?.bound, afterID = after?.id ?? 0
            let rows: PostgresRowSequence
            if let (name, value) = facet {
                let mergeTargets = try await self.mergeTargets(project: project)
                rows = try await connection.query(
                    """
                    SELECT id, bound FROM ((
                        SELECT f.group_id AS id, f.count AS bound FROM group_facets f JOIN crash_groups g ON g.id = f.group_id
                        WHERE f.project_id = \(project) AND f.facet = \(name) AND f.value = \(value)
                          AND f.last_seen >= \(window.from) AND f.first_seen < \(window.to)
                          AND (\(afterBound)::bigint IS NULL OR f.count < \(afterBound) OR (f.count = \(afterBound) AND f.group_id > \(afterID)))
                          AND (\(atLeast)::bigint IS NULL OR f.count >= \(atLeast))
                          AND \(groupFilter: f, alias: "g") AND NOT EXISTS (SELECT 1 FROM crash_groups m WHERE m.merged_into = g.id)
                        ORDER BY f.count DESC, f.group_id LIMIT \(limit)
                    ) UNION ALL (
                        -- Merge targets: the facet's counts and times of the group and its members.
                        SELECT g.id, t.n FROM (
                            SELECT o.owner, sum(f.count)::bigint AS n, min(f.first_seen) AS first_seen, max(f.last_seen) AS last_seen
                            FROM \(owners: mergeTargets) o
                            JOIN group_facets f ON f.group_id = o.member AND f.facet = \(name) AND f.value = \(value)
                            GROUP BY o.owner
                        ) t JOIN crash_groups g ON g.id = t.owner
                        WHERE t.last_seen >= \(window.from) AND t.first_seen < \(window.to)
                          AND (\(afterBound)::bigint IS NULL OR t.n < \(afterBound) OR (t.n = \(afterBound) AND g.id > \(afterID)))
                          AND (\(atLeast)::bigint IS NULL OR t.n >= \(atLeast))
                          AND \(groupFilter: f, alias: "g")
                    )) x ORDER BY bound DESC, id LIMIT \(limit)
                    """, logger: logger)
            } else {
                rows = try await connection.query(
                    """
                    SELECT id, bound FROM ((
                        SELECT id, report_count AS bound FROM crash_groups g
                        WHERE project_id = \(project) AND last_seen >= \(window.from) AND first_seen < \(window.to)
                          AND (\(afterBound)::bigint IS NULL OR report_count < \(afterBound) OR (report_count = \(afterBound) AND id > \(afterID)))
                          AND (\(atLeast)::bigint IS NULL OR report_count >= \(atLeast))
                          AND \(groupFilter: f, alias: "g") AND NOT EXISTS (SELECT 1 FROM crash_groups m WHERE m.merged_into = g.id)
                        ORDER BY report_count DESC, id LIMIT \(limit)
                    ) UNION ALL (
                        -- Merge targets: the count and times of the group and its members.
                        SELECT g.id, t.report_count FROM \(mergeTargetsOf: project) t JOIN crash_groups g ON g.id = t.id
                        WHERE t.last_seen >= \(window.from) AND t.first_seen < \(window.to)
                          AND (\(afterBound)::bigint IS NULL OR t.report_count < \(afterBound)
                               OR (t.report_count = \(afterBound) AND g.id > \(afterID)))
                          AND (\(atLeast)::bigint IS NULL OR t.report_count >= \(atLeast))
                          AND \(groupFilter: f, alias: "g")
                    )) x ORDER BY bound DESC, id LIMIT \(limit)
                    """, logger: logger)
            }
            var out: [(Int64, Int64)] = []
            for try await (id, bound) in rows.decode((Int64, Int64).self) { out.append((id, bound)) }
            return out
        }

        /// The next groups by `lastSeen` or `firstSeen` (descending, ties by id ascending) after
        /// `after` (microseconds, id), with the time in microseconds.
        func timeCandidates(
            project: Int64, sort: GroupSort, window: TimeWindow, filters f: GroupFilters, after: (Int64, Int64)?, limit: Int
        ) async throws -> [(id: Int64, key: Int64)] {
            let afterKey = after?.0, afterID = after?.1 ?? 0
            let column = sort == .firstSeen ? "first_seen" : "last_seen"
            // With `environment=`, the times are those of the group's reports in those
            // environments (their 'environment' facets); else the group's own (an index scan).
            let environments = f.environments
            let rows: PostgresRowSequence
            if environments.isEmpty {
                rows = try await connection.query(
                    """
                    SELECT id, (extract(epoch FROM t) * 1000000)::bigint FROM ((
                        SELECT id, \(unescaped: column) AS t FROM crash_groups g
                        WHERE project_id = \(project) AND last_seen >= \(window.from) AND first_seen < \(window.to)
                          AND (\(afterKey)::bigint IS NULL OR \(unescaped: column) < 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond'
                               OR (\(unescaped: column) = 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond' AND id > \(afterID)))
                          AND \(groupFilter: f, alias: "g") AND NOT EXISTS (SELECT 1 FROM crash_groups m WHERE m.merged_into = g.id)
                        ORDER BY \(unescaped: column) DESC, id LIMIT \(limit)
                    ) UNION ALL (
                        -- Merge targets: the times of the group and its members.
                        SELECT g.id, x.\(unescaped: column) FROM \(mergeTargetsOf: project) x JOIN crash_groups g ON g.id = x.id
                        WHERE x.last_seen >= \(window.from) AND x.first_seen < \(window.to)
                          AND (\(afterKey)::bigint IS NULL OR x.\(unescaped: column) < 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond'
                               OR (x.\(unescaped: column) = 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond' AND g.id > \(afterID)))
                          AND \(groupFilter: f, alias: "g")
                    )) y ORDER BY t DESC, id LIMIT \(limit)
                    """, logger: logger)
            } else {
                rows = try await connection.query(
                    """
                    SELECT g.id, (extract(epoch FROM t.\(unescaped: column)) * 1000000)::bigint
                    FROM (
                        SELECT COALESCE(m.merged_into, m.id) AS group_id, min(f.first_seen) AS first_seen, max(f.last_seen) AS last_seen
                        FROM group_facets f JOIN crash_groups m ON m.id = f.group_id
                        WHERE f.project_id = \(project) AND f.facet = 'environment' AND f.value = ANY(\(environments)::text[])
                        GROUP BY 1
                    ) t JOIN crash_groups g ON g.id = t.group_id
                    WHERE t.last_seen >= \(window.from) AND t.first_seen < \(window.to)
                      AND (\(afterKey)::bigint IS NULL OR t.\(unescaped: column) < 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond'
                           OR (t.\(unescaped: column) = 'epoch'::timestamptz + \(afterKey) * interval '1 microsecond' AND g.id > \(afterID)))
                      AND \(groupFilter: f, alias: "g")
                    ORDER BY t.\(unescaped: column) DESC, g.id LIMIT \(limit)
                    """, logger: logger)
            }
            var out: [(Int64, Int64)] = []
            for try await (id, key) in rows.decode((Int64, Int64).self) { out.append((id, key)) }
            return out
        }

        /// `lastSeen`/`firstSeen` (microseconds) as of `snapshot`, for the project's groups whose
        /// value was moved by reports committed after it (the others keep their current value);
        /// nil for a group that had no report then. A report of a merged group moves the group it
        /// is merged into (the one listed), whose key is that of all its members.
        func timeKeysAsOf(project: Int64, sort: GroupSort, snapshot: String) async throws -> [Int64: Int64?] {
            let last = sort == .lastSeen
            let rows = try await connection.query(
                """
                WITH delta AS (
                    SELECT COALESCE(m.merged_into, m.id) AS owner, max(r.ts) AS hi, min(r.ts) AS lo
                    FROM reports r JOIN crash_groups m ON m.id = r.group_id
                    WHERE r.project_id = \(project)
                      AND r.xact >= pg_snapshot_xmin(\(snapshot)::pg_snapshot)
                      AND NOT pg_visible_in_snapshot(r.xact, \(snapshot)::pg_snapshot)
                    GROUP BY 1
                ), owned AS (
                    SELECT d.owner, d.hi, d.lo, array_agg(g.id) AS members, max(g.last_seen) AS last_seen,
                           min(g.first_seen) AS first_seen
                    FROM delta d
                    CROSS JOIN LATERAL (SELECT d.owner AS id UNION ALL SELECT id FROM crash_groups WHERE merged_into = d.owner) mm
                    JOIN crash_groups g ON g.id = mm.id
                    GROUP BY d.owner, d.hi, d.lo
                )
                SELECT o.owner, (extract(epoch FROM (
                    SELECT CASE WHEN \(last) THEN max(k.t) ELSE min(k.t) END FROM unnest(o.members) AS m(id)
                    CROSS JOIN LATERAL (
                        SELECT CASE WHEN \(last) THEN
                            (SELECT max(r.ts) FROM reports r WHERE r.group_id = m.id AND pg_visible_in_snapshot(r.xact, \(snapshot)::pg_snapshot))
                        ELSE
                            (SELECT min(r.ts) FROM reports r WHERE r.group_id = m.id AND pg_visible_in_snapshot(r.xact, \(snapshot)::pg_snapshot))
                        END AS t
                    ) k
                )) * 1000000)::bigint
                FROM owned o
                WHERE CASE WHEN \(last) THEN o.hi >= o.last_seen ELSE o.lo <= o.first_seen END
                """, logger: logger)
            var out: [Int64: Int64?] = [:]
            for try await (id, key) in rows.decode((Int64, Int64?).self) { out[id] = key }
            return out
        }
    }
}

/// What one read snapshot holds, found by its first read that asks and kept for the others: a
/// REPEATABLE READ snapshot never changes, so a page that counts several times (a count-sorted
/// list's rounds of candidates, a release's top and new groups) probes it once.
final class SnapshotFacts: Sendable {
    /// Per project: whether it has batches the aggregator has not folded in this snapshot.
    private let pendingRollups = Mutex<[Int64: Bool]>([:])

    func pending(project: Int64) -> Bool? { pendingRollups.withLock { $0[project] } }

    func setPending(_ pending: Bool, project: Int64) { pendingRollups.withLock { $0[project] = pending } }
}
