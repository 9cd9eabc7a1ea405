import CrashGrouping
import CrashWire
import Foundation
import Logging
import PostgresNIO

extension CrashDatabase {
    /// Stores `items` (unique by ``ReportKey``) in one transaction: the group-commit.
    ///
    /// Claims the ids in the `report_ids` ledger (retries become no-ops), then for the
    /// new reports only: upserts each distinct group, inserts the reports, and adds them
    /// to their groups' counts, regressions and rollups. Everything is set-based: a fixed number
    /// of round trips per batch, whatever its size. Rows are touched in key order so
    /// concurrent batches do not deadlock; a deadlock or serialization failure that
    /// happens anyway is retried.
    ///
    /// The transaction runs under PostgreSQL's own lock and statement timeouts
    /// (``setIngestTimeouts(_:)``), and sends `COMMIT` only if `gate` lets it: once the
    /// batcher's deadline has passed it rolls back instead.
    ///
    /// - Returns: the keys of the reports stored by this call.
    /// - Throws: ``CommitOutcomeUnknown`` when the connection failed after `COMMIT` was sent,
    ///   before its answer; any other error means nothing was stored.
    func store(_ items: [IngestItem], gate: CommitGate) async throws -> Set<ReportKey> {
        var attempt = 0
        while true {
            do {
                return try await client.withTransaction(logger: logger) { connection in
                    try gate.begin { Task { try? await connection.close() } }
                    try await setIngestTimeouts(connection)
                    let fresh = try await storeInTransaction(items, connection)
                    try gate.commit()
                    return fresh
                }
            } catch  where ["40P01", "40001"].contains(sqlState(error)) && attempt < 5 {
                attempt += 1
                logger.debug("ingest transaction retried", metadata: ["db.sqlstate": "\(sqlState(error) ?? "")"])
            } catch let error as PostgresTransactionError where error.commitError.map(isAnsweredCommitFailure) == false {
                throw CommitOutcomeUnknown(underlying: error)
            }
        }
    }

    /// The transaction's statements, in the order that avoids deadlocks: the id ledger, the
    /// groups (created, then locked and counted), then one statement with everything else.
    /// Six round trips with `BEGIN`, the timeouts and `COMMIT` (seven when the batch has device
    /// ids, whose sketches are read first; one more when a resolved group is in the batch).
    private func storeInTransaction(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> Set<ReportKey> {
        let fresh = try await claimIDs(items, connection)
        let stored = items.filter { fresh.contains($0.key) }
        guard !stored.isEmpty else { return fresh }
        let groups = try await upsertGroups(stored, connection)
        // The group of each stored report, looked up once for every statement below.
        let groupIDs = stored.map { groups[$0.groupKey]! }
        let regressed = try await updateGroups(stored, groupIDs, connection)
        try await writeReportsAndRollups(stored, groupIDs, regressed: regressed, connection)
        return fresh
    }

    /// Creates missing groups and returns the id of every group in `items`.
    private func upsertGroups(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> [GroupKey: Int64] {
        var first: [GroupKey: IngestItem] = [:]
        for item in items {
            if let seen = first[item.groupKey], seen.report.timestamp <= item.report.timestamp { continue }
            first[item.groupKey] = item
        }
        let rows = first.values.sorted { ($0.projectID, $0.signature.hash) < ($1.projectID, $1.signature.hash) }
        var ids: [GroupKey: Int64] = [:]
        let result = try await connection.run(UpsertGroups.self, rows, logger: logger)
        for try await row in result {
            let (id, project, signature) = try row.decode((Int64, Int64, String).self)
            ids[GroupKey(project: project, signature: signature)] = id
        }
        // A group another transaction created after this statement's snapshot: read it now.
        let missing = first.keys.filter { ids[$0] == nil }
        for key in missing {
            let again = try await connection.query(
                "SELECT id FROM crash_groups WHERE project_id = \(key.project) AND signature = \(key.signature)",
                logger: logger)
            for try await id in again.decode(Int64.self) { ids[key] = id }
            guard ids[key] != nil else { throw IngestStoreError(description: "crash group vanished during ingest") }
        }
        return ids
    }

    enum UpsertGroups: FixedStatement {
        static func query(_ rows: [IngestItem]) -> PostgresQuery {
            """
            WITH input AS (
                SELECT * FROM unnest(\(rows.map(\.projectID)), \(rows.map(\.signature.hash)), \(rows.map(\.signature.version.rawValue)),
                                     \(rows.map(\.report.kind.rawValue)), \(rows.map(\.signature.title)),
                                     \(rows.map(\.signature.normalizedReason)), \(rows.map(\.report.timestamp)))
                    AS r(p, s, v, k, t, n, ts)
            ), ins AS (
                INSERT INTO crash_groups (project_id, signature, grouping_version, kind, title, normalized_reason, first_seen, last_seen)
                SELECT p, s, v, k, t, n, ts, ts FROM input ORDER BY p, s
                ON CONFLICT (project_id, signature) DO NOTHING
                RETURNING id, project_id, signature
            )
            SELECT id, project_id, signature FROM ins
            UNION ALL
            SELECT g.id, g.project_id, g.signature FROM crash_groups g JOIN input i ON g.project_id = i.p AND g.signature = i.s
            """
        }
        static let sql = query([]).sql
    }

    /// Records the ids in the idempotency ledger; returns the keys that were new.
    /// A duplicate touches nothing else: no group, count or rollup.
    private func claimIDs(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> Set<ReportKey> {
        let result = try await connection.run(ClaimIDs.self, items, logger: logger)
        var fresh = Set<ReportKey>()
        for try await row in result {
            let (project, id) = try row.decode((Int64, UUID).self)
            fresh.insert(ReportKey(project: project, id: id))
        }
        return fresh
    }

    enum ClaimIDs: FixedStatement {
        static func query(_ items: [IngestItem]) -> PostgresQuery {
            """
            INSERT INTO report_ids (project_id, id, ts)
            SELECT * FROM unnest(\(items.map(\.projectID)), \(items.map(\.report.id)), \(items.map(\.report.timestamp))) AS r(p, id, ts)
            ORDER BY p, id
            ON CONFLICT (project_id, id) DO NOTHING
            RETURNING project_id, id
            """
        }
        static let sql = query([]).sql
    }

    /// Adds newly stored reports to their groups: counts, first/last seen, fatal, and
    /// regression of resolved groups (`groupIDs`: the group of each of `stored`). Returns the
    /// groups it turned from resolved to regressed.
    private func updateGroups(
        _ stored: [IngestItem], _ groupIDs: [Int64], _ connection: PostgresConnection
    ) async throws -> Set<Int64> {
        struct Delta {
            var n: Int64 = 0
            var first = Date.distantFuture
            var last = Date.distantPast
            var fatal = false
            var versions: [String] = []
        }
        var deltas: [Int64: Delta] = [:]
        for (item, id) in zip(stored, groupIDs) {
            var d = deltas[id, default: Delta()]
            d.n += 1
            d.first = min(d.first, item.report.timestamp)
            d.last = max(d.last, item.report.timestamp)
            d.fatal = d.fatal || item.report.fatal == true
            d.versions.append(item.report.app.version)
            deltas[id] = d
        }
        let ids = deltas.keys.sorted()
        let d = ids.map { deltas[$0]! }
        // Locks the groups in id order (the materialized CTE, which the UPDATE joins, is read
        // before any row is updated), adds the counts, and returns the groups that were
        // resolved: whether they regress is decided here (``AppVersion``), in a second
        // statement that only a batch with a resolved group pays.
        let resolved = try await connection.run(CountGroups.self, (ids, d.map(\.n), d.map(\.first), d.map(\.last), d.map(\.fatal)), logger: logger)
        var regressedIDs = Set<Int64>()
        for try await row in resolved {
            let (id, resolvedIn) = try row.decode((Int64, String?).self)
            let regressed = resolvedIn.map { resolvedIn in deltas[id]!.versions.contains { AppVersion.compare($0, resolvedIn) >= 0 } } ?? true
            if regressed { regressedIDs.insert(id) }
        }
        if !regressedIDs.isEmpty {
            try await connection.query(
                "UPDATE crash_groups SET status = 'regressed' WHERE id = ANY(\(regressedIDs.sorted()))", logger: logger)
        }
        return regressedIDs
    }

    enum CountGroups: FixedStatement {
        static func query(_ u: (ids: [Int64], n: [Int64], first: [Date], last: [Date], fatal: [Bool])) -> PostgresQuery {
            """
            WITH locked AS MATERIALIZED (
                SELECT id, status, resolved_in FROM crash_groups WHERE id = ANY(\(u.ids)) ORDER BY id FOR UPDATE
            ), updated AS (
                UPDATE crash_groups g SET
                    report_count = g.report_count + u.n,
                    first_seen = LEAST(g.first_seen, u.f),
                    last_seen = GREATEST(g.last_seen, u.l),
                    fatal = g.fatal OR u.fatal
                FROM locked k JOIN unnest(\(u.ids), \(u.n), \(u.first), \(u.last), \(u.fatal)) AS u(id, n, f, l, fatal) ON u.id = k.id
                WHERE g.id = k.id
                RETURNING k.id, k.status, k.resolved_in
            )
            SELECT id, resolved_in FROM updated WHERE status = 'resolved'
            """
        }
        static let sql = query(([], [], [], [], [])).sql
    }
}

/// The ingest transaction found the database in a state it cannot explain.
struct IngestStoreError: Error, CustomStringConvertible {
    let description: String
}
