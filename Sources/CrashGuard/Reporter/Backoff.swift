import Foundation

/// Exponential backoff with full jitter (`random(0, min(cap, base * 2^attempt))`, AWS's
/// "full jitter"), overridden by a server's `Retry-After`.
struct Backoff: Sendable {
    /// The first retry's ceiling.
    var base: Duration = .seconds(1)
    /// The largest ceiling.
    var cap: Duration = .seconds(300)
    /// The longest `Retry-After` honoured (a broken header must not park uploads for days).
    var maxRetryAfter: Duration = .seconds(3600)
    /// Picks the jittered delay in `0...ceiling` seconds; injected for tests.
    var jitter: @Sendable (Double) -> Double = { Double.random(in: 0...$0) }

    /// The delay before retry number `attempt` (0-based). A `Retry-After` wins: the server
    /// said when it can take the request, so earlier is pointless and later is not needed.
    func delay(attempt: Int, retryAfter: Duration?) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), maxRetryAfter) }
        let ceiling = min(cap.seconds, base.seconds * pow(2, Double(min(attempt, 62))))
        let chosen = min(max(jitter(ceiling), 0), ceiling)
        return .milliseconds(Int64((chosen * 1000).rounded()))
    }

    /// Parses `Retry-After`: delay-seconds, or an HTTP-date relative to `now`.
    static func parseRetryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return .seconds(max(seconds, 0)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: value) {
                return .milliseconds(Int64(max(date.timeIntervalSince(now), 0) * 1000))
            }
        }
        return nil
    }
}
