import Foundation

/// A delivery a sender claimed: everything needed to render, sign and send it.
struct ClaimedDelivery: Sendable {
    var id: UUID
    var event: String
    /// The group the event is about; nil for a `release.crashFreeSessions` firing.
    var groupID: Int64?
    var attempts: Int
    var createdAt: Date
    var url: String
    var format: String
    var secret: String
    var projectID: Int64
    var projectSlug: String
    /// The alert rule that queued it (`rule` in the body), nil for an `events` subscription.
    var rule: AlertRuleRef? = nil
    /// The version of a `release.crashFreeSessions` firing.
    var release: String? = nil
    /// The firing rule's stored fields (its window and environments for a release's body);
    /// nil for an `events` subscription or a rule deleted since.
    var ruleSpec: String? = nil
}

/// The rule a delivery names: the body's `"rule": {"id", "name"}`.
struct AlertRuleRef: Encodable, Sendable, Equatable {
    var id: String
    var name: String
}

/// The alert aggregate: a project's webhooks (table `webhooks`), the outbox of their
/// deliveries (`webhook_deliveries`, rows queued by the ingest transaction and by spike
/// detection) and the spikes already fired (`group_spikes`).
///
/// Used by ``WebhookController`` (the webhook routes), ``WebhookSender`` (claims and outcomes)
/// and ``SpikeDetector``; ``PostgresWebhookStore`` is the implementation.
protocol WebhookStore: Sendable {
    /// Creates a webhook for `project`; answers it with its secret.
    func create(project: Int64, _ request: WebhookRequest, secret: String) async throws -> CreatedWebhookBody
    /// The project's webhooks, oldest first, each with its last delivery attempt.
    func list(project: Int64) async throws -> [WebhookBody]
    /// Deletes a webhook of `project` and its pending deliveries; `false` when there is none.
    func delete(project: Int64, id: Int64) async throws -> Bool
    /// The names of the alert rules of `project` whose actions name the webhook `id`.
    func rulesUsing(project: Int64, webhook id: Int64) async throws -> [String]
    /// Claims up to `limit` due deliveries, at most `perWebhook` leased per webhook at once,
    /// each leased for `lease` seconds.
    func claimDeliveries(limit: Int, lease: Double, perWebhook: Int) async throws -> [ClaimedDelivery]
    /// Records an attempt: delivered, or failed with a retry after `retryAfter` seconds, or
    /// (when `retryAfter` is nil) failed for good.
    func finishDelivery(id: UUID, delivered: Bool, httpStatus: Int?, error: String?, retryAfter: Double?) async throws
    /// Deletes delivered and failed deliveries older than `days`; returns how many.
    @discardableResult
    func pruneDeliveries(olderThanDays days: Int) async throws -> Int
    /// Queues a `group.spike` delivery for every group that spikes at `now`; returns their ids.
    @discardableResult
    func detectSpikes(now: Date) async throws -> [Int64]
}

extension WebhookStore {
    /// Claims with ``WebhookSettings/slotsPerWebhook`` slots per webhook.
    func claimDeliveries(limit: Int, lease: Double) async throws -> [ClaimedDelivery] {
        try await claimDeliveries(limit: limit, lease: lease, perWebhook: WebhookSettings.slotsPerWebhook)
    }

    /// Spikes as of now.
    @discardableResult
    func detectSpikes() async throws -> [Int64] { try await detectSpikes(now: Date()) }
}
