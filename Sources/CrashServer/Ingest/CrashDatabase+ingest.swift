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
    /// The transaction runs on the ingest pool, whose sessions carry PostgreSQL's own lock and
    /// statement timeouts (``IngestTimeouts``), and sends `COMMIT` only if `gate` lets it: once
    /// the batcher's deadline has passed it rolls back instead.
    ///
    /// - Returns: the keys of the reports stored by this call.
    /// - Throws: ``CommitOutcomeUnknown`` when the connection failed after `COMMIT` was sent,
    ///   before its answer; any other error means nothing was stored.
    func store(_ items: [IngestItem], gate: CommitGate) async throws -> Set<ReportKey> {
        var attempt = 0
        while true {
            do {
                return try await ingestClient.withTransaction(logger: logger) { connection in
                    try gate.begin { Task { try? await connection.close() } }
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

    /// The transaction's statements, in the order that avoids deadlocks: the id ledger and the
    /// groups (created, in one statement), the groups locked and counted, then one statement
    /// with everything else. Five round trips with `BEGIN` and `COMMIT` (six when the batch has
    /// device ids, whose sketches are read first; one more when a resolved group is in the batch).
    private func storeInTransaction(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> Set<ReportKey> {
        let (fresh, groups) = try await claimIDsAndGroups(items, connection)
        let stored = items.filter { fresh.contains($0.key) }
        guard !stored.isEmpty else { return fresh }
        // The group of each stored report, looked up once for every statement below.
        let groupIDs = stored.map { groups[$0.groupKey]! }
        let regressed = try await updateGroups(stored, groupIDs, connection)
        try await writeReportsAndRollups(stored, groupIDs, regressed: regressed, connection)
        return fresh
    }

    /// Records the ids in the idempotency ledger and creates the missing groups of the reports
    /// whose ids were new; returns those keys, and the id of every group they belong to.
    /// A duplicate touches nothing else: no group, count or rollup.
    private func claimIDsAndGroups(
        _ items: [IngestItem], _ connection: PostgresConnection
    ) async throws -> (fresh: Set<ReportKey>, groups: [GroupKey: Int64]) {
        let result = try await connection.run(ClaimIDsAndGroups.self, items, logger: logger)
        var fresh = Set<ReportKey>()
        var groups: [GroupKey: Int64] = [:]
        for try await row in result {
            let (project, id, group, signature) = try row.decode((Int64, UUID?, Int64?, String?).self)
            if let id { fresh.insert(ReportKey(project: project, id: id)) }
            if let group, let signature { groups[GroupKey(project: project, signature: signature)] = group }
        }
        // A group another transaction created after this statement's snapshot: read it now.
        let missing = Set(items.lazy.filter { fresh.contains($0.key) }.map(\.groupKey)).filter { groups[$0] == nil }
        for key in missing {
            let again = try await connection.query(
                "SELECT id FROM crash_groups WHERE project_id = \(key.project) AND signature = \(key.signature)",
                logger: logger)
            for try await id in again.decode(Int64.self) { groups[key] = id }
            guard groups[key] != nil else { throw IngestStoreError(description: "crash group vanished during ingest") }
        }
        return (fresh, groups)
    }

    /// The ledger insert (in key order), then the groups of the claimed reports: each created
    /// from its earliest report (the first in the batch among equals), in key order. Rows: a
    /// claimed `(project, id, NULL, NULL)`, or a group `(project, NULL, id, signature)`, created
    /// here or already there.
    enum ClaimIDsAndGroups: FixedStatement {
        static func query(_ items: [IngestItem]) -> PostgresQuery {
            """
            WITH input AS (
                SELECT * FROM unnest(\(items.map(\.projectID)), \(items.map(\.report.id)), \(items.map(\.report.timestamp)),
                                     \(items.map(\.signature.hash)), \(items.map(\.signature.version.rawValue)),
                                     \(items.map(\.report.kind.rawValue)), \(items.map(\.signature.title)),
                                     \(items.map(\.signature.normalizedReason)))
                    WITH ORDINALITY AS r(p, id, ts, s, v, k, t, n, o)
            ), claimed AS (
                INSERT INTO report_ids (project_id, id, ts)
                SELECT p, id, ts FROM input ORDER BY p, id
                ON CONFLICT (project_id, id) DO NOTHING
                RETURNING project_id, id
            ), firsts AS (
                SELECT DISTINCT ON (i.p, i.s) i.p, i.s, i.v, i.k, i.t, i.n, i.ts
                FROM input i JOIN claimed c ON c.project_id = i.p AND c.id = i.id
                ORDER BY i.p, i.s, i.ts, i.o
            ), ins AS (
                INSERT INTO crash_groups (project_id, signature, grouping_version, kind, title, normalized_reason, first_seen, last_seen)
                SELECT p, s, v, k, t, n, ts, ts FROM firsts ORDER BY p, s
                ON CONFLICT (project_id, signature) DO NOTHING
                RETURNING id, project_id, signature
            )
            SELECT project_id, id, NULL::bigint, NULL::text FROM claimed
            UNION ALL
            SELECT project_id, NULL, id, signature FROM ins
            UNION ALL
            SELECT g.project_id, NULL, g.id, g.signature FROM crash_groups g JOIN firsts f ON g.project_id = f.p AND g.signature = f.s
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
