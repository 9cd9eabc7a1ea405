import Foundation
import PostgresNIO

extension CrashDatabase {
    /// The transactional outbox's ingest step: queues `group.new` and `group.regressed`
    /// deliveries in the ingest transaction itself, so an event commits with the reports
    /// that caused it or not at all (a crash, SIGTERM or database restart loses none, and a
    /// retried duplicate, which stores nothing, queues nothing).
    ///
    /// Runs after the groups' counts were added: a group is new when its count is exactly
    /// this batch's reports of it (every committed group has counted its first reports, in
    /// the transaction that created it); `regressed` are the groups this transaction turned
    /// from resolved to regressed. One statement, and rows only for webhooks subscribed to
    /// the event: a project without webhooks pays one index probe per group of the batch.
    func queueAlertEvents(
        _ stored: [IngestItem], _ groups: [GroupKey: Int64], regressed: Set<Int64>, _ connection: PostgresConnection
    ) async throws {
        var counts: [Int64: Int64] = [:]
        for item in stored { counts[groups[item.groupKey]!, default: 0] += 1 }
        let ids = counts.keys.sorted()
        let ns = ids.map { counts[$0]! }
        let regressedIDs = regressed.sorted()
        try await connection.query(
            """
            INSERT INTO webhook_deliveries (id, webhook_id, group_id, event)
            SELECT gen_random_uuid(), w.id, e.group_id, e.event
            FROM (
                SELECT g.id AS group_id, g.project_id, 'group.new' AS event
                FROM unnest(\(ids)::bigint[], \(ns)::bigint[]) AS b(id, n)
                JOIN crash_groups g ON g.id = b.id AND g.report_count = b.n
                UNION ALL
                SELECT g.id, g.project_id, 'group.regressed' FROM crash_groups g WHERE g.id = ANY(\(regressedIDs)::bigint[])
            ) e
            JOIN webhooks w ON w.project_id = e.project_id AND e.event = ANY(w.events)
            ORDER BY w.id, e.group_id
            """, logger: logger)
    }
}
