import Foundation

/// How webhooks are delivered and spikes detected; part of ``ServerConfiguration``, whose
/// ``ServerConfiguration/settings`` name, read and check these.
///
/// The defaults meet the contract (delivered within 10 s when the receiver answers, first
/// retry within 30 s, retried for at least 24 hours); tests shorten them.
public struct WebhookSettings: Sendable, Equatable {
    /// Seconds one delivery attempt may take, from the lookup and the connection to the last
    /// byte of the answer (`CRASHGUARD_WEBHOOK_TIMEOUT`).
    public var timeout: Double = 10
    /// Seconds between looks for due deliveries (`CRASHGUARD_WEBHOOK_POLL_INTERVAL`).
    public var pollInterval: Double = 1
    /// Seconds before the first retry (`CRASHGUARD_WEBHOOK_RETRY_DELAY`); doubled per attempt.
    public var retryDelay: Double = 10
    /// Longest wait between two retries, in seconds (`CRASHGUARD_WEBHOOK_RETRY_MAX_DELAY`).
    public var retryMaxDelay: Double = 3600
    /// Seconds after the event during which a failed delivery is retried
    /// (`CRASHGUARD_WEBHOOK_RETRY_FOR`); the first failure after it gives up.
    public var retryFor: Double = 24 * 3600
    /// Deliveries sent at once by one server (`CRASHGUARD_WEBHOOK_CONCURRENCY`); 0 turns
    /// delivery off on this server (others, sharing the database, still deliver).
    public var concurrency = 16
    /// Seconds between spike detections (`CRASHGUARD_SPIKE_INTERVAL`); 0 turns it off.
    public var spikeInterval: Double = 60
    /// Receivers allowed although their host is refused (loopback, private, ... or
    /// `localhost`): `CRASHGUARD_WEBHOOK_ALLOW_HOSTS`, comma-separated `host` or `host:port`,
    /// matched against the URL's host as written; empty by default.
    public var allowHosts: [String] = []

    /// Deliveries of one webhook sent at once, across all servers: a slow or hanging receiver
    /// holds at most this many slots, and its other due deliveries wait.
    static let slotsPerWebhook = 2

    /// The defaults.
    public init() {}

    /// Seconds a claimed delivery stays invisible to other senders: past the POST's timeout,
    /// so a sender that died mid-POST has its deliveries sent again by someone else.
    var lease: Double { timeout + 5 }

    /// The wait before retry number `attempt` (1 for the first retry): `retryDelay` doubled
    /// per attempt up to `retryMaxDelay`, with ±20 % jitter so a failing receiver's backlog
    /// does not come back all at once.
    func backoff(attempt: Int, jitter: Double = Double.random(in: 0.8...1.2)) -> Double {
        let doublings = min(max(attempt - 1, 0), 30)
        return min(retryDelay * Double(1 << doublings), retryMaxDelay) * jitter
    }

    /// ``allowHosts``, parsed (reading the setting checked every entry).
    var allowList: WebhookAllowList { (try? WebhookAllowList(parsing: allowHosts.joined(separator: ","))) ?? WebhookAllowList() }
}
