import CrashGrouping
import CrashWire
import Foundation
import Logging
import PostgresNIO

/// The group-commit transaction on PostgreSQL: the ledger, the groups, the reports, their
/// rollup facts and the webhook outbox of a batch, in one transaction on the ingest pool.
///
/// Claims the ids in the `report_ids` ledger (retries become no-ops), then for the
/// new reports only: upserts each distinct group, inserts the reports, adds them to their
/// groups' counts and regressions, and appends their rollup facts to `rollup_pending`, which
/// ``RollupAggregator`` folds into the rollups after the commit. Everything is set-based: a fixed
/// number of round trips per batch, whatever its size. Rows are touched in key order so
/// concurrent batches do not deadlock; a deadlock or serialization failure that
/// happens anyway is retried.
struct PostgresIngestStore: IngestStore {
    /// The ingest pool (``CrashDatabase/ingestClient``): its sessions carry PostgreSQL's own
    /// lock and statement timeouts (``IngestTimeouts``) and the generic plans.
    let client: PostgresClient
    /// Most estimated bytes of reports one statement binds (`maxBatchBytes`): a request over
    /// it is still one transaction, its reports written in several statements
    /// (``writeReports(_:_:regressed:_:)``).
    let maxStatementBytes: Int
    let logger: Logger
    /// Runs right before `COMMIT` is sent, on the transaction's connection: tests end the
    /// connection there.
    let beforeCommit: @Sendable (PostgresConnection) async throws -> Void

    init(database: CrashDatabase, beforeCommit: @escaping @Sendable (PostgresConnection) async throws -> Void = { _ in }) {
        client = database.ingestClient
        maxStatementBytes = database.maxStatementBytes
        self.beforeCommit = beforeCommit
        logger = database.logger
    }

    /// Stores `items` (unique by ``ReportKey``) in one transaction: the group-commit.
    ///
    /// The transaction sends `COMMIT` only if `gate` lets it: once the batcher's deadline has
    /// passed it rolls back instead.
    ///
    /// A statement PostgresNIO wrote after its connection had closed is never answered
    /// (``endingOnConnectionClose(whenCancelled:grace:_:)``); one written before is failed as
    /// soon as the close is seen. So a statement still unanswered a second after its connection
    /// closed never reached PostgreSQL, a `COMMIT` included: the transaction was rolled back,
    /// and the batch is refused (503) rather than answered "outcome unknown" (500).
    ///
    /// - Returns: the keys of the reports stored by this call.
    /// - Throws: ``CommitOutcomeUnknown`` when the connection failed after `COMMIT` was sent,
    ///   before its answer; any other error means nothing was stored.
    func store(_ items: [IngestItem], gate: CommitGate) async throws -> Set<ReportKey> {
        var attempt = 0
        while true {
            do {
                return try await endingOnConnectionClose(whenCancelled: .awaitOutcome, grace: .seconds(1)) { leased in
                    try await client.withTransactionClosingRefused(logger: logger) { connection in
                        leased(connection)
                        try gate.begin { Task { try? await connection.close() } }
                        let fresh = try await storeInTransaction(items, connection)
                        try gate.commit()
                        try await beforeCommit(connection)
                        return fresh
                    }
                }
            } catch let error where ["40P01", "40001"].contains(sqlState(error)) && attempt < 5 {
                attempt += 1
                logger.debug(
                    "ingest transaction retried",
                    metadata: ["ingest.attempt": "\(attempt)", "ingest.retry_reason": "\(sqlState(error) ?? "")"])
            } catch let error as TransactionError where error.commitError.map(isAnsweredCommitFailure) == false {
                throw CommitOutcomeUnknown(underlying: error)
            }
        }
    }

    /// The transaction's statements, in the order that avoids deadlocks: the id ledger, the
    /// groups (created with their counts, or locked and counted, in key order) in one statement,
    /// then one statement with everything else. Four round trips with `BEGIN` and `COMMIT`
    /// (one more when a resolved group regresses, and one per part of a batch over the batch
    /// bytes beyond the first: ``writeReports(_:_:regressed:_:)``).
    private func storeInTransaction(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> Set<ReportKey> {
        let items = try await applyQuotas(items, now: Date(), connection)
        guard !items.isEmpty else { return [] }
        let claim = try await claimAndCount(items, connection)
        let stored = claim.duplicates.isEmpty ? items : items.filter { !claim.duplicates.contains($0.key) }
        let fresh = Set(stored.lazy.map(\.key))
        guard !stored.isEmpty else { return fresh }
        // The group of each stored report, looked up once for every statement below.
        var groupIDs: [Int64] = []
        groupIDs.reserveCapacity(stored.count)
        for item in stored {
            guard let id = claim.groups[item.groupKey] else {
                throw IngestStoreError(description: "the group of a stored report was neither created nor counted")
            }
            groupIDs.append(id)
        }
        // A merged group's reports stay its own (rollups, counts), but regress and wake the group
        // it is merged into (triage.md, "Merge and unmerge").
        let triageIDs = claim.targets.isEmpty ? groupIDs : groupIDs.map { claim.targets[$0] ?? $0 }
        let regressed = try await regress(stored, triageIDs, resolved: claim.resolved, connection)
        let reappeared = try await countSnoozed(stored, triageIDs, snoozed: claim.snoozed, connection)
        try await writeReports(stored, groupIDs, regressed: regressed, connection)
        try await AlertRuleFiring.fireAtIngest(
            stored, groupIDs, regressed: regressed, reappeared: Set(reappeared), connection, logger: logger)
        return fresh
    }

    /// What ``IngestSQL/ClaimAndCount`` found: the keys already in the ledger (retries; every other key of
    /// the batch was new), the id of every group the new ones belong to, and the `resolved_in`
    /// of those groups that were resolved (nil: resolved without a version), and the groups
    /// snoozed until a count of new reports or devices (``countSnoozed(_:_:snoozed:_:)``). For a
    /// group merged into another, `resolved` and `snoozed` are the target's, keyed by the target,
    /// and `targets` maps the group to it.
    struct Claim {
        var duplicates = Set<ReportKey>()
        var groups: [GroupKey: Int64] = [:]
        var targets: [Int64: Int64] = [:]
        var resolved: [Int64: String?] = [:]
        var snoozed = Set<Int64>()
    }

    private func claimAndCount(_ items: [IngestItem], _ connection: PostgresConnection) async throws -> Claim {
        let result = try await connection.run(IngestSQL.ClaimAndCount.self, IngestSQL.ClaimAndCount.Input(items), logger: logger)
        var claim = Claim()
        for try await row in result {
            let (project, id, group, signature, resolved, resolvedIn, snoozed, target) = try row.decode(
                (Int64, UUID?, Int64?, String?, Bool?, String?, Bool?, Int64?).self)
            if let id { claim.duplicates.insert(ReportKey(project: project, id: id)) }
            if let group, let signature { claim.groups[GroupKey(project: project, signature: signature)] = group }
            if let group, let target { claim.targets[group] = target }
            if let group = target ?? group, resolved == true { claim.resolved[group] = .some(resolvedIn) }
            if let group = target ?? group, snoozed == true { claim.snoozed.insert(group) }
        }
        return claim
    }

    /// Turns the resolved groups that a new report regresses (its version >= `resolved_in`, or
    /// any report when `resolved_in` is absent; ``AppVersion``) into regressed, each with a
    /// `regressed` activity entry naming the version of the report that regressed it; returns
    /// them. A statement only when one regresses.
    private func regress(
        _ stored: [IngestItem], _ groupIDs: [Int64], resolved: [Int64: String?], _ connection: PostgresConnection
    ) async throws -> Set<Int64> {
        guard !resolved.isEmpty else { return [] }
        var regressedIDs = Set<Int64>()
        var entries: (ids: [Int64], data: [String]) = ([], [])
        for (item, id) in zip(stored, groupIDs) {
            guard let resolvedIn = resolved[id], !regressedIDs.contains(id) else { continue }
            if resolvedIn.map({ AppVersion.compare(item.report.app.version, $0) >= 0 }) ?? true {
                regressedIDs.insert(id)
                entries.ids.append(id)
                entries.data.append(String(decoding: try JSONEncoder().encode(["version": item.report.app.version]), as: UTF8.self))
            }
        }
        if !regressedIDs.isEmpty {
            try await connection.query(
                """
                WITH regressed AS (UPDATE crash_groups SET status = 'regressed' WHERE id = ANY(\(regressedIDs.sorted())))
                INSERT INTO group_activity (group_id, type, actor, data)
                SELECT g, 'regressed', \(Principal.system.name), d FROM unnest(\(entries.ids)::bigint[], \(entries.data)::text[]) AS x(g, d)
                ORDER BY g
                """, logger: logger)
        }
        return regressedIDs
    }
}

extension IngestSQL {
    /// Records the ids in the idempotency ledger (a duplicate touches nothing else: no group,
    /// count or rollup), then, for the reports whose ids were new, upserts each of their groups:
    /// created with its attributes from ``Input`` and its times and counts from the reports
    /// claimed, or, when it exists, locked and counted. Rows: a `(project, id)` that was claimed
    /// before (a duplicate: most batches have none, so the answer is a row per group, not one per
    /// report), or a group `(project, id, signature, resolved, resolved_in, snoozed, target)` (`snoozed`:
    /// ignored until a count of new reports or devices; for a group merged into another, `target`
    /// is that group and the three before it are the target's: one primary-key probe, only for
    /// merged groups).
    ///
    /// The groups are written in `(project, signature)` order, so two transactions that share
    /// groups lock them in the same order and wait rather than deadlock. A group that another
    /// transaction is creating at the same moment is waited for and then counted, as any
    /// existing one (`ON CONFLICT DO UPDATE` sees the committed row).
    ///
    /// Each group is found through the arbiter of its `ON CONFLICT`, the unique index on
    /// `(project_id, signature)`, which the planner does not choose. A join that found the
    /// existing groups did: the generic plan of an ingest session made on a fresh database (every
    /// table empty, so every index looked alike) took `crash_groups_by_first_seen` for the
    /// project and filtered its signatures, reading every group of the project for each group of
    /// the batch until autovacuum's first `ANALYZE` (docs/performance.md).
    enum ClaimAndCount: FixedStatement {
        /// The batch as the statement binds it: each report's key, time, fatal flag and group
        /// (an index into the groups, from 1), and each group's attributes once. A group's
        /// attributes come from its earliest report in the batch (the first among equals); its
        /// times and counts, in the statement, from the reports it claims.
        struct Input {
            var projects: [Int64] = [], ids: [UUID] = [], times: [Date] = [], groupIndexes: [Int64] = [], fatal: [Bool] = []
            var groupProjects: [Int64] = [], signatures: [String] = [], versions: [String] = [], kinds: [String] = []
            var titles: [String] = [], reasons: [String] = []

            init() {}

            init(_ items: [IngestItem]) {
                var index: [GroupKey: Int] = [:]
                var earliest: [Date] = []
                for item in items {
                    let key = item.groupKey
                    let at = item.report.timestamp
                    if let i = index[key] {
                        groupIndexes.append(Int64(i + 1))
                        guard at < earliest[i] else { continue }
                        earliest[i] = at
                        (versions[i], kinds[i], titles[i], reasons[i]) = (
                            item.signature.version.rawValue, item.report.kind.rawValue, item.signature.title, item.signature.normalizedReason
                        )
                    } else {
                        index[key] = signatures.count
                        groupIndexes.append(Int64(signatures.count + 1))
                        earliest.append(at)
                        groupProjects.append(item.projectID)
                        signatures.append(key.signature)
                        versions.append(item.signature.version.rawValue)
                        kinds.append(item.report.kind.rawValue)
                        titles.append(item.signature.title)
                        reasons.append(item.signature.normalizedReason)
                    }
                }
                projects = items.map(\.projectID)
                ids = items.map(\.report.id)
                times = items.map(\.report.timestamp)
                fatal = items.map { $0.report.fatal == true }
            }
        }

        static func query(_ b: Input) -> PostgresQuery {
            """
            WITH input AS (
                SELECT unnest(\(b.projects)) AS p, unnest(\(b.ids)) AS id, unnest(\(b.times)) AS ts, unnest(\(b.groupIndexes)) AS g,
                       unnest(\(b.fatal)) AS fatal
            ), groups AS (
                SELECT unnest(\(b.groupProjects)) AS p, unnest(\(b.signatures)) AS s, unnest(\(b.versions)) AS v, unnest(\(b.kinds)) AS k,
                       unnest(\(b.titles)) AS t, unnest(\(b.reasons)) AS reason, unnest(\(b.signatures.indices.map { Int64($0 + 1) })) AS g
            ), claimed AS (
                INSERT INTO report_ids (project_id, id)
                SELECT p, id FROM input ORDER BY p, id
                ON CONFLICT (project_id, id) DO NOTHING
                RETURNING project_id, id
            ), counts AS (
                SELECT i.g, count(*) AS n, min(i.ts) AS f, max(i.ts) AS l, bool_or(i.fatal) AS fatal
                FROM input i JOIN claimed c ON c.project_id = i.p AND c.id = i.id GROUP BY i.g
            ), upserted AS (
                INSERT INTO crash_groups AS g (project_id, signature, grouping_version, kind, title, normalized_reason,
                                               first_seen, last_seen, report_count, fatal)
                SELECT x.p, x.s, x.v, x.k, x.t, x.reason, c.f, c.l, c.n, c.fatal FROM counts c JOIN groups x ON x.g = c.g
                ORDER BY x.p, x.s
                ON CONFLICT (project_id, signature) DO UPDATE SET
                    report_count = g.report_count + EXCLUDED.report_count,
                    first_seen = LEAST(g.first_seen, EXCLUDED.first_seen),
                    last_seen = GREATEST(g.last_seen, EXCLUDED.last_seen),
                    fatal = g.fatal OR EXCLUDED.fatal
                RETURNING g.project_id, g.id, g.signature, g.status = 'resolved', g.resolved_in,
                          g.status = 'ignored' AND (g.snooze_count IS NOT NULL OR g.snooze_devices IS NOT NULL), g.merged_into
            )
            SELECT i.p, i.id, NULL::bigint, NULL::text, NULL::boolean, NULL::text, NULL::boolean, NULL::bigint FROM input i
            WHERE NOT EXISTS (SELECT 1 FROM claimed c WHERE c.project_id = i.p AND c.id = i.id)
            UNION ALL
            SELECT u.project_id, NULL, u.id, u.signature, COALESCE(t.resolved, u.resolved),
                   CASE WHEN t.id IS NULL THEN u.resolved_in ELSE t.resolved_in END, COALESCE(t.snoozed, u.snoozed), t.id
            FROM upserted AS u(project_id, id, signature, resolved, resolved_in, snoozed, merged_into)
            LEFT JOIN LATERAL (
                SELECT id, status = 'resolved' AS resolved, resolved_in,
                       status = 'ignored' AND (snooze_count IS NOT NULL OR snooze_devices IS NOT NULL) AS snoozed
                FROM crash_groups WHERE id = u.merged_into
            ) t ON true
            """
        }
        static let sql = query(Input()).sql
    }
}
