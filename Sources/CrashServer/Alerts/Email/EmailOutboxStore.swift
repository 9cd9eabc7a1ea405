import Foundation

/// An e-mail delivery a sender claimed: one address of one firing.
struct ClaimedEmail: Sendable {
    var id: UUID
    var event: String
    /// The group the firing is about; nil for a release's (`crashFreeSessions`).
    var groupID: Int64?
    /// The version a `crashFreeSessions` firing names.
    var release: String?
    var attempts: Int
    var createdAt: Date
    var to: String
    /// The project of the group (or of the rule, for a release); nil when both are gone.
    var projectID: Int64?
    var projectSlug: String?
    var rule: AlertRuleRef?
    /// The rule's stored JSON when it still exists.
    var ruleSpec: String?
}

/// The e-mail side of the alert outbox (`webhook_deliveries` rows with an `email_to` address,
/// queued by ``AlertRuleFiring`` in the transaction of the firing): claims and outcomes.
/// ``PostgresEmailOutboxStore`` is the implementation; ``EmailSender`` the user.
protocol EmailOutboxStore: Sendable {
    /// Claims up to `limit` due e-mail deliveries, each leased for `lease` seconds.
    func claimEmails(limit: Int, lease: Double) async throws -> [ClaimedEmail]
    /// Records an attempt: delivered, or failed with a retry after `retryAfter` seconds, or
    /// (when `retryAfter` is nil) failed for good. `replyCode` is the SMTP server's refusal.
    func finishEmail(id: UUID, delivered: Bool, replyCode: Int?, error: String?, retryAfter: Double?) async throws
}
