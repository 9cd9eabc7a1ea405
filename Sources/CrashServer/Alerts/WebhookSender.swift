import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// Sends the outbox's deliveries: the `Service` that claims due rows of
/// `webhook_deliveries` (several servers may run one each), POSTs each signed body through a
/// ``WebhookTransport`` (address rules, one deadline per attempt, a bounded answer), and records
/// the outcome: delivered on a 2xx, else retried with exponential backoff until
/// ``WebhookSettings/retryFor`` has passed since the event.
///
/// Never in the ingest path: ingest only writes outbox rows. On graceful shutdown it stops
/// claiming and lets the POSTs in flight finish (each bounded by the timeout); a delivery cut
/// off by a crash is sent again once its lease expires, so a receiver may see one twice.
struct WebhookSender: Service {
    let store: any WebhookStore
    /// The group a payload describes, read in one snapshot through the read routing.
    let queries: PostgresQueryStore
    /// Set once the schema is applied (``CrashDatabase/schemaApplied``).
    let schemaApplied: ReadyFlag
    let settings: WebhookSettings
    let publicURL: String
    let metrics: ServerMetrics
    let logger: Logger

    func run() async throws {
        guard settings.concurrency > 0 else { return await PollingService.idleUntilShutdown() }
        // Lookups block a thread each (getaddrinfo); a pool of their own keeps a slow DNS
        // server from taking threads that file I/O needs.
        let pool = NIOThreadPool(numberOfThreads: min(settings.concurrency, 8))
        pool.start()
        let transport = WebhookTransport(
            timeout: settings.timeout, allowList: settings.allowList, resolver: .system(on: pool),
            eventLoopGroup: HTTPClient.defaultEventLoopGroup)
        await loop(transport)
        try await pool.shutdownGracefully()
    }

    /// Up to ``WebhookSettings/concurrency`` POSTs in flight, each slot claimed again as soon as
    /// it is free (at the next poll), and at most ``WebhookSettings/slotsPerWebhook`` of one
    /// webhook: a receiver that hangs until the timeout holds two slots, never the deliveries
    /// of other webhooks claimed beside or after them.
    private func loop(_ transport: WebhookTransport) async {
        await PollingService.waitForSchema(schemaApplied)
        let inFlight = NIOLockedValueBox(0)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                let free = settings.concurrency - inFlight.withLockedValue { $0 }
                var claimed: [ClaimedDelivery] = []
                if free > 0 {
                    do {
                        claimed = try await store.claimDeliveries(limit: free, lease: settings.lease.inSeconds)
                    } catch {
                        logger.warning("webhook deliveries not claimed", metadata: ["error.message": "\(String(reflecting: error))"])
                    }
                }
                for delivery in claimed {
                    inFlight.withLockedValue { $0 += 1 }
                    group.addTask {
                        await attempt(delivery, transport)
                        inFlight.withLockedValue { $0 -= 1 }
                    }
                }
                if claimed.count < free || free == 0 {
                    // Wake for the next poll, or at once on shutdown. The POSTs in flight go on,
                    // and on shutdown the group waits for them (each bounded by the timeout).
                    await PollingService.sleep(for: settings.pollInterval)
                }
            }
        }
    }

    /// One POST of one delivery, and its outcome recorded.
    private func attempt(_ delivery: ClaimedDelivery, _ transport: WebhookTransport) async {
        var httpStatus: Int?
        var failure: String?
        do {
            guard let body = try await render(delivery) else {
                // The group is gone (its project was deleted in between): nothing to say.
                try await store.finishDelivery(
                    id: delivery.id, delivered: false, httpStatus: nil, error: "crash group no longer exists", retryAfter: nil)
                metrics.countDelivery(outcome: "dropped")
                return
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "User-Agent", value: "CrashGuard-Webhook/1")
            headers.add(name: "X-CrashGuard-Event", value: delivery.event)
            headers.add(name: "X-CrashGuard-Delivery", value: delivery.id.uuidString.lowercased())
            headers.add(name: "X-CrashGuard-Signature", value: Self.signature(body, secret: delivery.secret))
            let outcome = await transport.post(url: delivery.url, headers: headers, body: body)
            httpStatus = outcome.httpStatus
            failure = outcome.error?.description
        } catch {
            // Rendering failed (the database): the delivery is retried like a failed POST.
            logger.warning("webhook delivery not rendered", metadata: ["error.message": "\(String(reflecting: error))"])
            failure = WebhookDeliveryError.connectionFailed.description
        }
        let delivered = failure == nil
        var retryAfter: Double? = nil
        if !delivered, .seconds(Date().timeIntervalSince(delivery.createdAt)) < settings.retryFor {
            retryAfter = settings.backoff(attempt: delivery.attempts + 1).inSeconds
        }
        let outcome = delivered ? "delivered" : (retryAfter == nil ? "failed" : "retry")
        metrics.countDelivery(outcome: outcome)
        var metadata: Logger.Metadata = [
            "webhook.delivery": "\(delivery.id.uuidString.lowercased())", "webhook.event": "\(delivery.event)",
            "webhook.attempt": "\(delivery.attempts + 1)", "webhook.outcome": "\(outcome)",
        ]
        if let failure { metadata["error.message"] = "\(failure)" }
        logger.log(level: delivered ? .debug : .notice, "webhook delivery attempted", metadata: metadata)
        do {
            try await store.finishDelivery(
                id: delivery.id, delivered: delivered, httpStatus: httpStatus, error: failure, retryAfter: retryAfter)
        } catch {
            // The lease runs out and the delivery is sent again: at least once, maybe twice.
            logger.warning("webhook delivery outcome not recorded", metadata: ["error.message": "\(String(reflecting: error))"])
        }
    }

    /// The body for the webhook's format, or nil when the group no longer exists.
    func render(_ delivery: ClaimedDelivery) async throws -> [UInt8]? {
        let format = WebhookFormat(rawValue: delivery.format) ?? .json
        guard let groupID = delivery.groupID else {
            guard let version = delivery.release,
                let release = try await AlertRuleFiring.releaseBody(
                    project: delivery.projectID, projectSlug: delivery.projectSlug, version: version, ruleSpec: delivery.ruleSpec,
                    now: Date(), database: queries.database, publicURL: publicURL)
            else { return nil }
            return try WebhookPayload.renderRelease(
                format: format, event: delivery.event, project: delivery.projectSlug, release: release.body, below: release.below,
                deliveredAt: Date(), rule: delivery.rule)
        }
        let window = TimeWindow.lastSevenDays()
        try await queries.awaitRollups(project: delivery.projectID)
        let group = try await queries.read { reader in
            try await reader.groupBody(project: delivery.projectID, group: groupID, window: window)
        }
        guard let group else { return nil }
        return try WebhookPayload.render(
            format: format, event: delivery.event, project: delivery.projectSlug,
            group: group, publicURL: publicURL, deliveredAt: Date(), rule: delivery.rule)
    }

    /// `sha256=` and the lowercase hex HMAC-SHA256 of `body` keyed with the secret's UTF-8 bytes.
    static func signature(_ body: [UInt8], secret: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: Array(secret.utf8)))
        return "sha256=" + mac.map { String(format: "%02x", $0) }.joined()
    }

}
