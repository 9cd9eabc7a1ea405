import Synchronization

/// Per-project token buckets: `rate` requests per second with bursts of `burst`.
///
/// Checked after authentication and before the body is read, so a flood costs no
/// inflating. Per server process: with N replicas a project gets up to N times the rate.
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let rate: Double
    private let burst: Double
    private let buckets = Mutex<[Int64: Bucket]>([:])
    private let clock = ContinuousClock()

    /// `rate` 0 turns limiting off.
    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = max(1, burst)
    }

    /// Takes a token for `project`; returns nil when allowed, else whole seconds until one is free.
    func acquire(project: Int64) -> Int? {
        guard rate > 0 else { return nil }
        let now = clock.now
        return buckets.withLock { buckets in
            var bucket = buckets[project] ?? Bucket(tokens: burst, updated: now)
            let elapsed = bucket.updated.duration(to: now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(burst, bucket.tokens + seconds * rate)
            bucket.updated = now
            defer { buckets[project] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
    }
}
