import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Sends the outbox's e-mail deliveries: the `Service` that claims due rows with an address
/// (several servers may run one each), renders each message from the group (or release) as it
/// is then, sends it through an ``SMTPClient`` and records the outcome: delivered once the
/// server accepted the data; failed at once when it refused the recipient or the message with
/// a 5xx; otherwise (timeout, connection or TLS error, 4xx, a 5xx earlier in the dialogue)
/// retried with the webhooks' backoff until ``WebhookSettings/retryFor`` has passed since the
/// firing. The delivery id is the message's `Message-ID` and `X-CrashGuard-Delivery` on every
/// attempt, so a retry is recognisably the same message.
///
/// Never in the ingest path: ingest only writes outbox rows. Idle on a server without
/// `CRASHGUARD_SMTP_URL` (rows wait for a server that has it). A message cut off by a crash is
/// sent again once its lease expires: at least once, maybe twice.
struct EmailSender: Service {
    let store: any EmailOutboxStore
    /// The group a message describes, read through the read routing; releases from the primary.
    let queries: PostgresQueryStore
    let schemaApplied: ReadyFlag
    let settings: EmailSettings
    /// Polling, backoff and the retry period: the webhooks'.
    let schedule: WebhookSettings
    let publicURL: String
    let metrics: ServerMetrics
    let logger: Logger

    func run() async throws {
        guard settings.enabled else { return await PollingService.idleUntilShutdown() }
        let client = try SMTPClient(
            server: try SMTPServer(url: settings.smtpURL), timeout: settings.timeout, heloName: Self.host(of: publicURL),
            caFile: settings.caFile)
        await PollingService.waitForSchema(schemaApplied)
        let inFlight = NIOLockedValueBox(0)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                let free = EmailSettings.concurrency - inFlight.withLockedValue { $0 }
                var claimed: [ClaimedEmail] = []
                if free > 0 {
                    do {
                        claimed = try await store.claimEmails(limit: free, lease: settings.lease.inSeconds)
                    } catch {
                        logger.warning("e-mail deliveries not claimed", metadata: ["error.message": "\(String(reflecting: error))"])
                    }
                }
                for email in claimed {
                    inFlight.withLockedValue { $0 += 1 }
                    group.addTask {
                        await attempt(email, client)
                        inFlight.withLockedValue { $0 -= 1 }
                    }
                }
                if claimed.count < free || free == 0 { await PollingService.sleep(for: schedule.pollInterval) }
            }
        }
    }

    /// One message sent, and its outcome recorded.
    func attempt(_ email: ClaimedEmail, _ client: SMTPClient) async {
        var failure: String?
        var replyCode: Int?
        var permanent = false
        do {
            if let message = try await render(email) {
                do {
                    try await client.send(from: settings.from, to: email.to, message: message.render())
                } catch {
                    (failure, replyCode, permanent) = (error.description, error.replyCode, error.isPermanent)
                }
            } else {
                (failure, permanent) = ("the crash group, release or project no longer exists", true)
            }
        } catch {
            // Rendering failed (the database): retried like a failed attempt.
            logger.warning("e-mail not rendered", metadata: ["error.message": "\(String(reflecting: error))"])
            failure = "message not rendered"
        }
        var retryAfter: Double?
        if failure != nil, !permanent, .seconds(Date().timeIntervalSince(email.createdAt)) < schedule.retryFor {
            retryAfter = schedule.backoff(attempt: email.attempts + 1).inSeconds
        }
        let outcome = failure == nil ? "delivered" : (retryAfter == nil ? "failed" : "retry")
        metrics.countEmail(outcome: outcome)
        var metadata: Logger.Metadata = [
            "email.delivery": "\(email.id.uuidString.lowercased())", "email.event": "\(email.event)",
            "email.attempt": "\(email.attempts + 1)", "email.outcome": "\(outcome)",
        ]
        if let failure { metadata["error.message"] = "\(failure)" }
        logger.log(level: failure == nil ? .debug : .notice, "e-mail delivery attempted", metadata: metadata)
        do {
            try await store.finishEmail(
                id: email.id, delivered: failure == nil, replyCode: replyCode, error: failure, retryAfter: retryAfter)
        } catch {
            logger.warning("e-mail outcome not recorded", metadata: ["error.message": "\(String(reflecting: error))"])
        }
    }

    /// The message as of now, or nil when what it is about no longer exists.
    func render(_ email: ClaimedEmail) async throws -> EmailMessage? {
        guard let project = email.projectID, let slug = email.projectSlug else { return nil }
        let subject: EmailMessage.Subject
        if let groupID = email.groupID {
            let window = TimeWindow.lastSevenDays()
            try await queries.awaitRollups(project: project)
            let group = try await queries.read { reader in
                try await reader.groupBody(project: project, group: groupID, window: window)
            }
            guard let group else { return nil }
            subject = .group(group, url: WebhookPayload.groupURL(publicURL: publicURL, project: slug, group: group.id))
        } else if let version = email.release,
            let release = try await AlertRuleFiring.releaseBody(
                project: project, projectSlug: slug, version: version, ruleSpec: email.ruleSpec, now: Date(),
                database: queries.database, publicURL: publicURL)
        {
            subject = .release(release.body, below: release.below)
        } else {
            return nil
        }
        let when = email.ruleSpec.flatMap { try? PostgresAlertRuleStore.rule(spec: $0).when }
        return EmailMessage(
            deliveryID: email.id, event: email.event, rule: email.rule, when: when, project: slug, subject: subject,
            from: settings.from, to: email.to, date: Date(), host: Self.host(of: publicURL))
    }

    /// The host of the public URL (`Message-ID`'s right side, the `EHLO` name).
    static func host(of publicURL: String) -> String {
        URLComponents(string: publicURL)?.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost"
    }
}
