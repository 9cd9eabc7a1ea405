import Foundation
import Logging
import PostgresNIO

/// Deletions on PostgreSQL (schema.sql, "erasure"), on the primary pool.
///
/// A deletion goes through four kinds of step, each one transaction that holds the deletion's
/// row (`FOR UPDATE SKIP LOCKED`: a step of another server takes another deletion or none):
/// listing (the reports of the device stored up to the request, by the hash of its id, into
/// `deletion_reports`; the hash is forgotten, and the device's ids in `snooze_devices` go),
/// erasing the next chunk of the list (``ReportEraser``; the chunk leaves the list, counts in
/// `reports`, and adds the device sketches it leaves stale to `deletion_sketches`, in the same
/// transaction, so a step that dies is done again whole, and never twice), rebuilding the next
/// chunk of those sketches once the list is empty (``ReportEraser/rebuildSketches(project:_:on:)``;
/// they leave `deletion_sketches` in the same transaction), and done. The sketches wait for the
/// last chunk because consecutive chunks share their hours and days: each is rebuilt once per
/// deletion, not once per chunk that touched it.
struct PostgresDeletionStore: DeletionStore {
    let client: PostgresClient
    let logger: Logger

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    func request(project: Int64, device: String) async throws -> UUID {
        let id = UUID()
        try await client.query(
            "INSERT INTO deletions (id, project_id, device_hash) VALUES (\(id), \(project), \(ProjectKeys.hash(device)))", logger: logger)
        return id
    }

    func deletion(project: Int64, id: UUID) async throws -> Deletion? {
        let rows = try await client.query(
            "SELECT state, reports, requested_at, done_at FROM deletions WHERE project_id = \(project) AND id = \(id)", logger: logger)
        for try await (state, reports, requestedAt, doneAt) in rows.decode((String, Int64, Date, Date?).self) {
            return Deletion(
                deletion: id.uuidString.lowercased(), state: Deletion.State(rawValue: state) ?? .pending, reports: reports,
                requestedAt: requestedAt, doneAt: doneAt)
        }
        return nil
    }

    func step(limit: Int) async throws -> DeletionStep? {
        var attempt = 0
        while true {
            do {
                return try await client.withTransactionEndingOnClose(logger: logger) { try await step(limit: limit, $0) }
            } catch let error where ["40P01", "40001"].contains(sqlState(error)) && attempt < 5 {
                // A deadlock with an ingest transaction that locked the same groups in between.
                attempt += 1
            }
        }
    }

    private func step(limit: Int, _ connection: PostgresConnection) async throws -> DeletionStep? {
        let claimed = try await connection.query(
            """
            SELECT id, project_id, listed, device_hash, requested_at FROM deletions WHERE state = 'pending'
            ORDER BY requested_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
            """, logger: logger)
        var found: (UUID, Int64, Bool, Data?, Date)?
        for try await row in claimed.decode((UUID, Int64, Bool, Data?, Date).self) { found = row }
        guard let (id, project, listed, hash, requestedAt) = found else { return nil }
        if !listed {
            let rows = try await connection.query(
                """
                WITH listed AS (
                    INSERT INTO deletion_reports (deletion_id, ts, id)
                    SELECT \(id), r.ts, r.id FROM reports r
                    WHERE r.project_id = \(project) AND r.device_id <> '' AND r.received_at <= \(requestedAt)
                      AND sha256(convert_to(r.device_id, 'UTF8')) = \(hash)
                    ON CONFLICT DO NOTHING RETURNING 1
                ), snoozes AS (
                    DELETE FROM snooze_devices s USING crash_groups g
                    WHERE s.group_id = g.id AND g.project_id = \(project) AND sha256(convert_to(s.device_id, 'UTF8')) = \(hash)
                ), forgotten AS (
                    UPDATE deletions SET listed = true, device_hash = NULL WHERE id = \(id)
                )
                SELECT count(*) FROM listed
                """, logger: logger)
            var n: Int64 = 0
            for try await count in rows.decode(Int64.self) { n = count }
            return .listed(id, reports: Int(n))
        }
        let next = try await connection.query(
            "SELECT ts, id FROM deletion_reports WHERE deletion_id = \(id) ORDER BY ts, id LIMIT \(Int64(limit))", logger: logger)
        var keys: [ReportEraser.Key] = []
        for try await (ts, report) in next.decode((Date, UUID).self) { keys.append(ReportEraser.Key(ts: ts, id: report)) }
        let eraser = ReportEraser(logger: logger)
        guard !keys.isEmpty else {
            let sketches = try await nextSketches(id, limit: limit * Self.sketchesPerReport, connection)
            if !sketches.isEmpty {
                try await eraser.rebuildSketches(project: project, sketches, on: connection)
                return .rebuilt(id, sketches: sketches.count)
            }
            try await connection.query("UPDATE deletions SET state = 'done', done_at = now() WHERE id = \(id)", logger: logger)
            return .done(id)
        }
        let outcome = try await eraser.erase(project: project, keys: keys, sketches: .deferred, on: connection)
        let s = outcome.sketches
        try await connection.query(
            """
            WITH chunk AS (
                DELETE FROM deletion_reports d USING unnest(\(keys.map(\.ts))::timestamptz[], \(keys.map(\.id))::uuid[]) AS k(ts, id)
                WHERE d.deletion_id = \(id) AND d.ts = k.ts AND d.id = k.id
            ), sketches AS (
                INSERT INTO deletion_sketches (deletion_id, daily, group_id, app_version, bucket)
                SELECT \(id), * FROM unnest(\(s.map(\.daily))::boolean[], \(s.map(\.group))::bigint[], \(s.map(\.version))::text[],
                                            \(s.map(\.bucket))::timestamptz[])
                ON CONFLICT DO NOTHING
            )
            UPDATE deletions SET reports = reports + \(Int64(outcome.reports)) WHERE id = \(id)
            """, logger: logger)
        return .erased(id, reports: outcome.reports)
    }

    /// Sketch buckets rebuilt per step, per report erased per step: a bucket costs a read of
    /// the few reports in it, far less than erasing a report.
    static var sketchesPerReport: Int { 5 }

    /// Takes (deletes) the next `limit` sketches deletion `id` has to rebuild; the caller
    /// rebuilds them in the same transaction.
    private func nextSketches(_ id: UUID, limit: Int, _ connection: PostgresConnection) async throws -> [ReportEraser.SketchKey] {
        let rows = try await connection.query(
            """
            DELETE FROM deletion_sketches WHERE (deletion_id, daily, group_id, app_version, bucket) IN (
                SELECT deletion_id, daily, group_id, app_version, bucket FROM deletion_sketches WHERE deletion_id = \(id)
                ORDER BY daily, group_id, app_version, bucket LIMIT \(Int64(limit)))
            RETURNING daily, group_id, app_version, bucket
            """, logger: logger)
        var keys: [ReportEraser.SketchKey] = []
        for try await (daily, group, version, bucket) in rows.decode((Bool, Int64, String, Date).self) {
            keys.append(ReportEraser.SketchKey(daily: daily, group: group, version: version, bucket: bucket))
        }
        return keys
    }
}
