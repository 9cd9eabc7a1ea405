import Foundation
import Logging
import PostgresNIO

/// ``EmailOutboxStore`` on PostgreSQL: the primary's pool; the rows are the webhook outbox's.
struct PostgresEmailOutboxStore: EmailOutboxStore {
    let client: PostgresClient
    let logger: Logger
    /// Outcomes are recorded as webhook deliveries' are.
    private let webhooks: PostgresWebhookStore

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
        webhooks = PostgresWebhookStore(database: database)
    }

    /// Claims up to `limit` due e-mail deliveries, oldest due first, skipping rows another
    /// server is claiming; each is leased for `lease` seconds (its next attempt moved past
    /// the lease), so a sender that dies leaves it to be sent again when the lease runs out.
    func claimEmails(limit: Int, lease: Double) async throws -> [ClaimedEmail] {
        let rows = try await client.query(
            """
            WITH picked AS (
                SELECT id FROM webhook_deliveries
                WHERE state = 'pending' AND next_attempt_at <= now() AND email_to IS NOT NULL
                ORDER BY next_attempt_at
                LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE webhook_deliveries d SET
                    next_attempt_at = now() + make_interval(secs => \(lease)),
                    leased_until = now() + make_interval(secs => \(lease))
                FROM picked WHERE d.id = picked.id
                RETURNING d.id, d.event, d.group_id, d.release, d.attempts, d.created_at, d.email_to, d.rule_id, d.rule_name
            )
            SELECT c.id, c.event, c.group_id, c.release, c.attempts, c.created_at, c.email_to, c.rule_id, c.rule_name,
                   r.spec, p.id, p.slug
            FROM claimed c
            LEFT JOIN alert_rules r ON r.id = c.rule_id
            LEFT JOIN crash_groups g ON g.id = c.group_id
            LEFT JOIN projects p ON p.id = COALESCE(g.project_id, r.project_id)
            ORDER BY c.created_at
            """, logger: logger)
        var out: [ClaimedEmail] = []
        for try await (id, event, group, release, attempts, created, to, ruleID, ruleName, spec, project, slug) in rows.decode(
            (UUID, String, Int64?, String?, Int32, Date, String, Int64?, String?, String?, Int64?, String?).self)
        {
            out.append(
                ClaimedEmail(
                    id: id, event: event, groupID: group, release: release, attempts: Int(attempts), createdAt: created, to: to,
                    projectID: project, projectSlug: slug, rule: ruleID.map { AlertRuleRef(id: String($0), name: ruleName ?? "") },
                    ruleSpec: spec))
        }
        return out
    }

    /// The outcome, recorded as a webhook delivery's (the reply code in `last_status`).
    func finishEmail(id: UUID, delivered: Bool, replyCode: Int?, error: String?, retryAfter: Double?) async throws {
        try await webhooks.finishDelivery(
            id: id, delivered: delivered, httpStatus: replyCode, error: error, retryAfter: retryAfter)
    }
}
