import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Queues a `group.spike` delivery for every group that spikes at `now`, at most once per
    /// group per 24 hours; returns the spiking groups' ids.
    ///
    /// A group spikes when its count in the last hour is at least 10 and at least 5 times
    /// its hourly average over the 24 hours before. Read from the hourly rollups, never raw
    /// reports, and only for projects with a webhook subscribed to `group.spike`:
    /// - the last hour is the current hour's bucket plus the previous bucket weighted by the
    ///   part of it still inside the last 60 minutes (a sliding hour over hourly buckets),
    ///   from `group_hourly` (indexed by project and hour);
    /// - the baseline is the 24 whole buckets before those two, from `group_version_hourly`
    ///   (`app_version = ''`, by group and hour), divided by 24.
    ///
    /// One statement: the conditional upsert into `group_spikes` is the arbiter, so servers
    /// detecting at the same time queue each spike once (the second waits for the first's
    /// row and then finds it fired less than 24 hours ago).
    @discardableResult
    func detectSpikes(now: Date = Date()) async throws -> [Int64] {
        let rows = try await client.query(
            """
            WITH clock AS (
                SELECT \(now)::timestamptz AS now, date_trunc('hour', \(now)::timestamptz, 'UTC') AS h
            ), weight AS (
                SELECT now, h, 1 - extract(epoch FROM now - h) / 3600 AS previous FROM clock
            ), subscribed AS (
                SELECT DISTINCT project_id FROM webhooks WHERE 'group.spike' = ANY(events)
            ), recent AS (
                SELECT gh.group_id,
                       sum(CASE WHEN gh.hour = weight.h THEN gh.count ELSE gh.count * weight.previous END) AS n
                FROM subscribed s CROSS JOIN weight
                JOIN group_hourly gh ON gh.project_id = s.project_id
                    AND gh.hour >= weight.h - interval '1 hour' AND gh.hour <= weight.h
                GROUP BY gh.group_id
            ), spiking AS (
                SELECT r.group_id FROM recent r CROSS JOIN weight
                WHERE r.n >= 10 AND r.n >= 5 * COALESCE((
                    SELECT sum(v.count) FROM group_version_hourly v
                    WHERE v.group_id = r.group_id AND v.app_version = ''
                      AND v.hour >= weight.h - interval '25 hours' AND v.hour < weight.h - interval '1 hour'
                ), 0) / 24.0
            ), fired AS (
                INSERT INTO group_spikes (group_id, fired_at)
                SELECT s.group_id, weight.now FROM spiking s CROSS JOIN weight ORDER BY s.group_id
                ON CONFLICT (group_id) DO UPDATE SET fired_at = EXCLUDED.fired_at
                    WHERE group_spikes.fired_at <= EXCLUDED.fired_at - interval '24 hours'
                RETURNING group_id
            ), queued AS (
                INSERT INTO webhook_deliveries (id, webhook_id, group_id, event)
                SELECT gen_random_uuid(), w.id, f.group_id, 'group.spike'
                FROM fired f JOIN crash_groups g ON g.id = f.group_id
                JOIN webhooks w ON w.project_id = g.project_id AND 'group.spike' = ANY(w.events)
            )
            SELECT group_id FROM fired ORDER BY group_id
            """, logger: logger)
        var out: [Int64] = []
        for try await id in rows.decode(Int64.self) { out.append(id) }
        return out
    }
}
