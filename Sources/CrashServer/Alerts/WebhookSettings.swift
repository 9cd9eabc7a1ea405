import Foundation

/// How webhooks are delivered and spikes detected; part of ``ServerConfiguration``, whose
/// ``ServerConfiguration/settings`` name, read and check these.
///
/// The defaults meet the contract (delivered within 10 s when the receiver answers, first
/// retry within 30 s, retried for at least 24 hours); tests shorten them.
public struct WebhookSettings: Sendable, Equatable {
    /// How long one delivery attempt may take, from the lookup and the connection to the last
    /// byte of the answer.
    public var timeout: Duration = .seconds(10)
    /// The wait between looks for due deliveries.
    public var pollInterval: Duration = .seconds(1)
    /// The wait before the first retry; doubled per attempt.
    public var retryDelay: Duration = .seconds(10)
    /// The longest wait between two retries.
    public var retryMaxDelay: Duration = .seconds(3600)
    /// How long after the event a failed delivery is retried; the first failure after it
    /// gives up.
    public var retryFor: Duration = .seconds(24 * 3600)
    /// Deliveries sent at once by one server; 0 turns delivery off on this server (others,
    /// sharing the database, still deliver).
    public var concurrency = 16
    /// The wait between spike detections; 0 turns them off.
    public var spikeInterval: Duration = .seconds(60)
    /// The wait between checks of the alert rules no report fires (`crashFreeSessions`,
    /// ``AlertEvaluator``); 0 turns them off on this server.
    public var alertInterval: Duration = .seconds(60)
    /// Receivers allowed although their host is refused (loopback, private, ... or
    /// `localhost`): `host` or `host:port`, matched against the URL's host as written.
    public var allowHosts: [String] = []

    /// Deliveries of one webhook sent at once, across all servers: a slow or hanging receiver
    /// holds at most this many slots, and its other due deliveries wait.
    static let slotsPerWebhook = 2

    /// The defaults.
    public init() {}

    /// How long a claimed delivery stays invisible to other senders: past the POST's timeout,
    /// so a sender that died mid-POST has its deliveries sent again by someone else.
    var lease: Duration { timeout + .seconds(5) }

    /// The wait before retry number `attempt` (1 for the first retry): `retryDelay` doubled
    /// per attempt up to `retryMaxDelay`, with ±20 % jitter so a failing receiver's backlog
    /// does not come back all at once.
    func backoff(attempt: Int, jitter: Double = Double.random(in: 0.8...1.2)) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        return min(retryDelay * (1 << doublings), retryMaxDelay) * jitter
    }

    /// ``allowHosts``, parsed (reading the setting checked every entry).
    var allowList: WebhookAllowList { (try? WebhookAllowList(parsing: allowHosts.joined(separator: ","))) ?? WebhookAllowList() }
}
