import CrashWire
import Foundation
import PostgresNIO

extension PostgresIngestStore {
    /// Counts a batch's new reports toward the snoozes of its groups snoozed until a count of
    /// new reports or of new devices, and reopens those whose count is reached
    /// (``PostgresTriageStore/reappear(_:_:logger:)``: `open`, a `reappeared` entry and the
    /// `group.reappeared` deliveries), in the ingest transaction: the report that meets the
    /// condition commits with the reopening, and a retried duplicate, which stores nothing, counts
    /// nothing. New devices are the distinct non-empty `device.id` values kept in `snooze_devices`
    /// since the snooze. Statements only when the batch has such a group; the groups are locked
    /// already (``IngestSQL/ClaimAndCount``).
    /// Returns the groups reopened.
    @discardableResult
    func countSnoozed(
        _ stored: [IngestItem], _ groupIDs: [Int64], snoozed: Set<Int64>, _ connection: PostgresConnection
    ) async throws
        -> [Int64]
    {
        guard !snoozed.isEmpty else { return [] }
        var counts: [Int64: Int64] = [:]
        var devices = Set<[String]>()
        var deviceRows: (groups: [Int64], ids: [String]) = ([], [])
        for (item, group) in zip(stored, groupIDs) where snoozed.contains(group) {
            counts[group, default: 0] += 1
            if let device = item.report.device?.id, !device.isEmpty, devices.insert([String(group), device]).inserted {
                deviceRows.groups.append(group)
                deviceRows.ids.append(device)
            }
        }
        let ids = counts.keys.sorted()
        let rows = try await connection.query(
            """
            WITH b AS (
                SELECT unnest(\(ids)::bigint[]) AS g, unnest(\(ids.map { counts[$0]! })::bigint[]) AS n
            ), d AS (
                INSERT INTO snooze_devices (group_id, device_id)
                SELECT x.g, x.dev FROM unnest(\(deviceRows.groups)::bigint[], \(deviceRows.ids)::text[]) AS x(g, dev)
                JOIN crash_groups c ON c.id = x.g AND c.snooze_devices IS NOT NULL
                ORDER BY 1, 2
                ON CONFLICT DO NOTHING RETURNING group_id
            ), dn AS (
                SELECT group_id, count(*) AS n FROM d GROUP BY group_id
            )
            UPDATE crash_groups c
            SET snooze_seen = c.snooze_seen + CASE WHEN c.snooze_devices IS NOT NULL THEN COALESCE(dn.n, 0) ELSE b.n END
            FROM b LEFT JOIN dn ON dn.group_id = b.g
            WHERE c.id = b.g AND c.status = 'ignored' AND (c.snooze_count IS NOT NULL OR c.snooze_devices IS NOT NULL)
            RETURNING c.id, c.snooze_seen >= COALESCE(c.snooze_count, c.snooze_devices)
            """, logger: logger)
        var met: [Int64] = []
        for try await (id, reached) in rows.decode((Int64, Bool).self) where reached { met.append(id) }
        return try await PostgresTriageStore.reappear(met, connection, logger: logger)
    }
}
