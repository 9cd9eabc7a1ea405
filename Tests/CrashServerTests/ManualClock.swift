import Synchronization
@testable import CrashServerTestSupport

/// A clock that moves only when a test says so (``advance(by:)``), for state machines that read
/// `now` and never sleep on it: their time rules are tested without waiting. Sleeping on it is
/// not supported (it would never wake) and fails the call.
final class ManualClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        /// Time since the clock's start.
        var offset: Duration

        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private let current = Mutex(Instant(offset: .zero))

    var now: Instant { current.withLock { $0 } }
    var minimumResolution: Duration { .nanoseconds(1) }

    func advance(by duration: Duration) {
        current.withLock { $0 = $0.advanced(by: duration) }
    }

    struct SleepUnsupported: Error {}

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        throw SleepUnsupported()
    }
}
