import Foundation

/// The reporter's view of time: wall-clock `now` for report timestamps and validation, and
/// a sleep for backoff and the flush timer. A protocol of our own rather than a generic
/// `Clock` parameter (as swift-otel's batch processor takes) because the reporter lives in a
/// global and needs wall-clock dates; tests inject a clock whose sleeps return at once.
protocol ReporterClock: Sendable {
    /// The current wall-clock time.
    var now: Date { get }
    /// Suspends for `duration`; throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws
}

/// `Date()` and `ContinuousClock`.
struct SystemReporterClock: ReporterClock {
    var now: Date { Date() }
    func sleep(for duration: Duration) async throws {
        try await ContinuousClock().sleep(for: duration)
    }
}

extension Duration {
    /// Seconds as a `Double`.
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
