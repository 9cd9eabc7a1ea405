import Logging
import Synchronization

/// Refusals of one component (the body budget), counted by reason for `/metrics` and logged at
/// a bounded rate: the first refusal is logged at once, later ones at most one line per
/// ``interval``, which says how many came since the line before and the last one's message. A
/// flood of 503s shows in the log and the metrics without writing a line per request.
final class RefusalLog: Sendable {
    /// What refuses, as the log line names it.
    let subject: String
    let interval: Duration
    private let logger: Logger

    private struct State {
        /// Refusals since the start, by reason.
        var counts: [String: Int] = [:]
        /// Refusals not logged yet.
        var unlogged = 0
        var lastLine: ContinuousClock.Instant?
    }

    private let state = Mutex(State())

    init(subject: String, interval: Duration = .seconds(10), logger: Logger) {
        self.subject = subject
        self.interval = interval
        self.logger = logger
    }

    /// Counts one refusal for `reason` (a metric label: a few fixed words) and logs it, with
    /// those not logged yet, unless a line was written less than ``interval`` ago.
    func record(_ reason: String, _ message: String) {
        let now = ContinuousClock.now
        let count: Int? = state.withLock { state in
            state.counts[reason, default: 0] += 1
            state.unlogged += 1
            if let last = state.lastLine, last.duration(to: now) < interval { return nil }
            defer { state.unlogged = 0 }
            state.lastLine = now
            return state.unlogged
        }
        guard let count else { return }
        logger.warning(
            "\(subject) refused requests with 503",
            metadata: ["refusals": "\(count)", "refusal.reason": "\(reason)", "error.message": "\(message)"])
    }

    /// Refusals since the start, by reason.
    var counts: [String: Int] { state.withLock { $0.counts } }
}
