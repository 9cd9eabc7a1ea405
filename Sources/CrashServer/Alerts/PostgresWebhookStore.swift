import Foundation
import Logging
import PostgresNIO

/// ``WebhookStore`` on PostgreSQL: the primary's pool (``CrashDatabase/client``); claims and
/// spike detection are writes, and a project's webhooks are read where they were written.
struct PostgresWebhookStore: WebhookStore {
    let client: PostgresClient
    let logger: Logger
    /// The spike check reads the rollups once they hold every report committed before it.
    let rollups: RollupFreshness

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
        rollups = database.rollupFreshness
    }

    // MARK: - Webhooks

    /// Creates a webhook for `project`; answers it with its secret. At most
    /// ``WebhookRequest/maxPerProject`` per project.
    func create(project: Int64, _ request: WebhookRequest, secret: String) async throws -> CreatedWebhookBody {
        let events = request.events.map(\.rawValue)
        let rows = try await client.query(
            """
            INSERT INTO webhooks (project_id, url, events, format, secret)
            SELECT \(project), \(request.url), \(events), \(request.format.rawValue), \(secret)
            WHERE (SELECT count(*) FROM webhooks WHERE project_id = \(project)) < \(WebhookRequest.maxPerProject)
            RETURNING id, created_at
            """, logger: logger)
        for try await (id, created) in rows.decode((Int64, Date).self) {
            return CreatedWebhookBody(
                id: String(id), url: request.url, events: events, format: request.format.rawValue, createdAt: created,
                secret: secret)
        }
        throw APIError.badRequest("url: the project already has \(WebhookRequest.maxPerProject) webhooks; delete one first")
    }

    /// The project's webhooks, oldest first, each with its last delivery attempt.
    func list(project: Int64) async throws -> [WebhookBody] {
        let rows = try await client.query(
            """
            SELECT w.id, w.url, w.events, w.format, w.created_at,
                   d.id, d.event, d.state, d.last_attempt_at, d.attempts, d.last_status, d.last_error
            FROM webhooks w
            LEFT JOIN LATERAL (
                SELECT * FROM webhook_deliveries x
                WHERE x.webhook_id = w.id AND x.last_attempt_at IS NOT NULL
                ORDER BY x.last_attempt_at DESC LIMIT 1
            ) d ON true
            WHERE w.project_id = \(project)
            ORDER BY w.id
            """, logger: logger)
        var out: [WebhookBody] = []
        for try await row in rows.decode(
            (Int64, String, [String], String, Date, UUID?, String?, String?, Date?, Int32?, Int32?, String?).self)
        {
            var last: WebhookBody.LastDelivery?
            if let deliveryID = row.5, let event = row.6, let state = row.7, let at = row.8 {
                last = WebhookBody.LastDelivery(
                    id: deliveryID.uuidString.lowercased(), event: event, status: state == "pending" ? "retrying" : state,
                    at: at, attempts: Int(row.9 ?? 0), httpStatus: row.10.map(Int.init), error: row.11)
            }
            out.append(
                WebhookBody(
                    id: String(row.0), url: row.1, events: row.2, format: row.3, createdAt: row.4, lastDelivery: last))
        }
        return out
    }

    /// Deletes a webhook of `project` and its pending deliveries; `false` when there is none.
    func delete(project: Int64, id: Int64) async throws -> Bool {
        let rows = try await client.query(
            "DELETE FROM webhooks WHERE project_id = \(project) AND id = \(id) RETURNING id", logger: logger)
        for try await _ in rows.decode(Int64.self) { return true }
        return false
    }

    /// The names of the alert rules of `project` whose actions name the webhook `id`.
    func rulesUsing(project: Int64, webhook id: Int64) async throws -> [String] {
        let rows = try await client.query(
            "SELECT name FROM alert_rules WHERE project_id = \(project) AND \(id) = ANY(webhook_ids) ORDER BY id", logger: logger)
        var names: [String] = []
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    // MARK: - Delivery

    /// The advisory lock that makes claims take turns across servers, so the per-webhook
    /// count of leased deliveries they read is never stale.
    static let claimLockID: Int64 = 0x6372_6173_6877_686b  // "crashwhk"

    /// Claims up to `limit` due deliveries, at most `perWebhook` leased per webhook at once:
    /// a webhook whose receiver is slow or hangs holds its slots until its attempts end,
    /// and its other due deliveries wait instead of taking the sender's slots.
    ///
    /// Each claimed row is leased for `lease` seconds (`leased_until`, and its next attempt
    /// moved past the lease): a sender that dies leaves its deliveries, and their slots, to be
    /// taken again when the lease runs out. Claims are one transaction under an advisory lock,
    /// so servers claiming at once take turns and count each other's leases.
    func claimDeliveries(
        limit: Int, lease: Double, perWebhook: Int = WebhookSettings.slotsPerWebhook
    ) async throws
        -> [ClaimedDelivery]
    {
        try await client.withTransactionEndingOnClose(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.claimLockID))", logger: logger)
            let rows = try await connection.query(
                """
                WITH busy AS (
                    SELECT webhook_id, count(*) AS n FROM webhook_deliveries
                    WHERE leased_until > now() AND state = 'pending'
                    GROUP BY webhook_id
                ), due AS (
                    SELECT id, webhook_id, next_attempt_at,
                           row_number() OVER (PARTITION BY webhook_id ORDER BY next_attempt_at, id) AS place
                    FROM webhook_deliveries
                    WHERE state = 'pending' AND next_attempt_at <= now() AND webhook_id IS NOT NULL
                ), picked AS (
                    SELECT due.id FROM due LEFT JOIN busy ON busy.webhook_id = due.webhook_id
                    WHERE due.place + COALESCE(busy.n, 0) <= \(perWebhook)
                    ORDER BY due.next_attempt_at
                    LIMIT \(limit)
                )
                UPDATE webhook_deliveries d SET
                    next_attempt_at = now() + make_interval(secs => \(lease)),
                    leased_until = now() + make_interval(secs => \(lease))
                FROM picked, webhooks w JOIN projects p ON p.id = w.project_id
                WHERE d.id = picked.id AND w.id = d.webhook_id
                RETURNING d.id, d.event, d.group_id, d.attempts, d.created_at, w.url, w.format, w.secret, p.id, p.slug,
                          d.rule_id, d.rule_name, d.release, (SELECT r.spec FROM alert_rules r WHERE r.id = d.rule_id)
                """, logger: logger)
            var out: [ClaimedDelivery] = []
            for try await (id, event, group, attempts, created, url, format, secret, project, slug, ruleID, ruleName, release, spec)
                in rows.decode(
                    (UUID, String, Int64?, Int32, Date, String, String, String, Int64, String, Int64?, String?, String?, String?).self)
            {
                out.append(
                    ClaimedDelivery(
                        id: id, event: event, groupID: group, attempts: Int(attempts), createdAt: created, url: url,
                        format: format, secret: secret, projectID: project, projectSlug: slug,
                        rule: ruleID.map { AlertRuleRef(id: String($0), name: ruleName ?? "") }, release: release, ruleSpec: spec))
            }
            return out
        }
    }

    /// Records an attempt: delivered, or failed with a retry after `retryAfter` seconds, or
    /// (when `retryAfter` is nil) failed for good.
    func finishDelivery(id: UUID, delivered: Bool, httpStatus: Int?, error: String?, retryAfter: Double?) async throws {
        let state = delivered ? "delivered" : (retryAfter == nil ? "failed" : "pending")
        let status = httpStatus.map(Int32.init)
        try await client.query(
            """
            UPDATE webhook_deliveries SET
                state = \(state), attempts = attempts + 1, last_attempt_at = now(),
                last_status = \(status), last_error = \(error), leased_until = NULL,
                next_attempt_at = now() + make_interval(secs => \(retryAfter ?? 0))
            WHERE id = \(id)
            """, logger: logger)
    }

    /// Deletes delivered and failed deliveries older than `days`, a few thousand at a time.
    @discardableResult
    func pruneDeliveries(olderThanDays days: Int) async throws -> Int {
        let rows = try await client.query(
            """
            WITH old AS (
                SELECT id FROM webhook_deliveries
                WHERE state <> 'pending' AND created_at < now() - make_interval(days => \(Int32(days)))
                LIMIT 5000
            )
            DELETE FROM webhook_deliveries d USING old WHERE d.id = old.id RETURNING 1
            """, logger: logger)
        var n = 0
        for try await _ in rows.decode(Int32.self) { n += 1 }
        return n
    }

    // MARK: - Spikes

    /// Queues a `group.spike` delivery for every group that spikes at `now`, at most once per
    /// group per 24 hours, and fires the `spike` alert rules of the spiking groups (each rule
    /// throttled by its own `throttleMinutes`, ``AlertRuleFiring/fireSpikes(_:at:_:logger:)``);
    /// returns the ids of the groups whose `group.spike` was queued.
    ///
    /// A group spikes when its count in the last hour is at least 10 and at least 5 times
    /// its hourly average over the 24 hours before. Read from the hourly rollups, never raw
    /// reports, and only for projects with a webhook subscribed to `group.spike` or an enabled
    /// `spike` rule:
    /// - the last hour is the current hour's bucket plus the previous bucket weighted by the
    ///   part of it still inside the last 60 minutes (a sliding hour over hourly buckets),
    ///   from `group_hourly` (indexed by project and hour);
    /// - the baseline is the 24 whole buckets before those two, from `group_version_hourly`
    ///   (`app_version = ''`, by group and hour), divided by 24.
    ///
    /// A group merged into another counts in that target (triage.md, "Merge and unmerge"): both
    /// figures of a target add its members' reports, and only targets and unmerged groups spike,
    /// so a spike spread over a target and its members fires once, for the target.
    ///
    /// The rollups are read once they hold every report committed before the check
    /// (``RollupFreshness``), so a spike is seen as soon as its reports are stored.
    ///
    /// One transaction: the conditional upserts into `group_spikes` and `alert_firings` are the
    /// arbiters, so servers detecting at the same time queue each spike once (the second waits
    /// for the first's row and then finds it fired less than 24 hours ago).
    @discardableResult
    func detectSpikes(now: Date = Date()) async throws -> [Int64] {
        try await rollups.awaitFolded(project: nil)
        return try await client.withTransactionEndingOnClose(logger: logger) { connection in
            let rows = try await connection.query(
                """
                WITH clock AS (
                    SELECT \(now)::timestamptz AS now, date_trunc('hour', \(now)::timestamptz, 'UTC') AS h
                ), weight AS (
                    SELECT now, h, 1 - extract(epoch FROM now - h) / 3600 AS previous FROM clock
                ), subscribed AS (
                    SELECT project_id, bool_or(hook) AS hook FROM (
                        SELECT project_id, true AS hook FROM webhooks WHERE 'group.spike' = ANY(events)
                        UNION ALL
                        SELECT project_id, false FROM alert_rules WHERE enabled AND trigger = 'spike'
                    ) x GROUP BY project_id
                ), recent AS (
                    SELECT COALESCE(g.merged_into, g.id) AS group_id, bool_or(s.hook) AS hook,
                           sum(CASE WHEN gh.hour = weight.h THEN gh.count ELSE gh.count * weight.previous END) AS n
                    FROM subscribed s CROSS JOIN weight
                    JOIN group_hourly gh ON gh.project_id = s.project_id
                        AND gh.hour >= weight.h - interval '1 hour' AND gh.hour <= weight.h
                    JOIN crash_groups g ON g.id = gh.group_id
                    GROUP BY 1
                ), spiking AS (
                    SELECT r.group_id, r.hook FROM recent r CROSS JOIN weight
                    WHERE r.n >= 10 AND r.n >= 5 * COALESCE((
                        SELECT sum(v.count) FROM group_version_hourly v
                        WHERE v.group_id IN (SELECT r.group_id UNION ALL SELECT m.id FROM crash_groups m WHERE m.merged_into = r.group_id)
                          AND v.app_version = ''
                          AND v.hour >= weight.h - interval '25 hours' AND v.hour < weight.h - interval '1 hour'
                    ), 0) / 24.0
                ), fired AS (
                    INSERT INTO group_spikes (group_id, fired_at)
                    SELECT s.group_id, weight.now FROM spiking s CROSS JOIN weight WHERE s.hook ORDER BY s.group_id
                    ON CONFLICT (group_id) DO UPDATE SET fired_at = EXCLUDED.fired_at
                        WHERE group_spikes.fired_at <= EXCLUDED.fired_at - interval '24 hours'
                    RETURNING group_id
                ), queued AS (
                    INSERT INTO webhook_deliveries (id, webhook_id, group_id, event)
                    SELECT gen_random_uuid(), w.id, f.group_id, 'group.spike'
                    FROM fired f JOIN crash_groups g ON g.id = f.group_id
                    JOIN webhooks w ON w.project_id = g.project_id AND 'group.spike' = ANY(w.events)
                )
                SELECT s.group_id, f.group_id IS NOT NULL FROM spiking s LEFT JOIN fired f USING (group_id) ORDER BY s.group_id
                """, logger: logger)
            var spiking: [Int64] = []
            var queued: [Int64] = []
            for try await (id, fired) in rows.decode((Int64, Bool).self) {
                spiking.append(id)
                if fired { queued.append(id) }
            }
            try await AlertRuleFiring.fireSpikes(spiking, at: now, connection, logger: logger)
            return queued
        }
    }
}
