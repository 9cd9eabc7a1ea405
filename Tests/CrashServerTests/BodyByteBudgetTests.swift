import Synchronization
import Testing

@testable import CrashServer

/// The body budget's line (``BodyByteBudget``): bytes that come back go to the oldest waiter
/// that fits, a waiter for settled bytes holds back its project's later requests and no other
/// project's, a waiter for bytes of requests still being received holds back no one, and a
/// request let in by its declared size takes the room its body is expected to hold. Time is a
/// clock the test moves: no test sleeps.
@Suite struct BodyByteBudgetTests {
    /// A clock the test moves: a sleeper wakes once the clock passes its end, or when its task
    /// is cancelled.
    final class TestClock: Sendable {
        private struct Sleeper {
            let id: Int
            let end: Duration
            let continuation: CheckedContinuation<Void, Never>
        }

        private struct State {
            var now = Duration.zero
            var next = 0
            var sleepers: [Sleeper] = []
            var cancelled: Set<Int> = []
        }

        private let state = Mutex(State())

        /// Sleepers now.
        var sleeping: Int { state.withLock { $0.sleepers.count } }

        func sleep(_ duration: Duration) async {
            let id = state.withLock { state in
                defer { state.next += 1 }
                return state.next
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { state in
                        if state.cancelled.remove(id) != nil || duration <= .zero { return true }
                        state.sleepers.append(Sleeper(id: id, end: state.now + duration, continuation: continuation))
                        return false
                    }
                    if now { continuation.resume() }
                }
            } onCancel: {
                let sleeper = state.withLock { state in
                    guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else {
                        state.cancelled.insert(id)
                        return Sleeper?.none
                    }
                    return state.sleepers.remove(at: index)
                }
                sleeper?.continuation.resume()
            }
        }

        /// Moves the clock on by `duration`, waking every sleeper whose end it passes.
        func advance(by duration: Duration) {
            let woken = state.withLock { state in
                state.now += duration
                let woken = state.sleepers.filter { $0.end <= state.now }
                state.sleepers.removeAll { $0.end <= state.now }
                return woken
            }
            for sleeper in woken { sleeper.continuation.resume() }
        }
    }

    static func budget(_ clock: TestClock, limit: Int = 100) -> BodyByteBudget {
        BodyByteBudget(limit: limit, maxWait: .seconds(10), patience: .seconds(1), sleep: { await clock.sleep($0) })
    }

    /// A settled request of `project` holding `bytes`.
    static func settled(_ budget: BodyByteBudget, project: Int64, bytes: Int) throws -> BodyByteBudget.Reservation {
        let share = BodyByteBudget.Reservation(budget, project: project)
        try share.grow(to: bytes)
        share.settle(holding: bytes, received: bytes)
        return share
    }

    /// A request that waits in line for `bytes`, returning what it holds once let in.
    static func waiter(_ budget: BodyByteBudget, project: Int64, bytes: Int) -> Task<Int, any Error> {
        Task {
            let share = BodyByteBudget.Reservation(budget, project: project)
            try await share.growWaiting(to: bytes)
            return withExtendedLifetime(share) { share.held }
        }
    }

    /// A request that waits in line for `bytes` (``waiter(_:project:bytes:)``), once it is in line.
    static func inLine(_ budget: BodyByteBudget, project: Int64, bytes: Int) async -> Task<Int, any Error> {
        let before = budget.waitingNow
        let task = waiter(budget, project: project, bytes: bytes)
        while budget.waitingNow <= before { await Task.yield() }
        return task
    }

    /// Lets the other tasks run a while: what they would do with bytes that came back, they do.
    static func settle(until done: () -> Bool = { false }) async {
        for _ in 0..<2_000 where !done() { await Task.yield() }
    }

    /// Bytes that come back go to the oldest waiter that fits: a later, smaller request of the
    /// same project does not take them first (waking every waiter and letting the first to
    /// look take the room let it starve the large one), and it follows once the large one is in.
    @Test func bytesThatComeBackGoToTheOldestWaiterFirst() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock)
        var first: BodyByteBudget.Reservation? = try Self.settled(budget, project: 1, bytes: 25)
        var second: BodyByteBudget.Reservation? = try Self.settled(budget, project: 1, bytes: 25)
        let large = await Self.inLine(budget, project: 1, bytes: 30)
        let small = await Self.inLine(budget, project: 1, bytes: 10)
        // 25 bytes come back: room for the small one, not for the large one, which is first.
        second = nil
        await Self.settle { budget.inUse(by: .project(1)) != 25 }
        #expect(budget.inUse(by: .project(1)) == 25)
        #expect(budget.waitingNow == 2)
        // 25 more: both in, the large one first.
        first = nil
        #expect(try await large.value == 30)
        #expect(try await small.value == 10)
        #expect(budget.waitingNow == 0)
        #expect(budget.refusals.counts.isEmpty)
        withExtendedLifetime((first, second)) {}
    }

    /// A waiter for settled bytes holds back its own project's later requests, not another
    /// project's: those take the other half at once.
    @Test func aWaiterHoldsBackOnlyItsOwnProject() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock)
        let settled = try Self.settled(budget, project: 1, bytes: 45)
        let waiting = await Self.inLine(budget, project: 1, bytes: 10)
        // Project 1 has 5 bytes free, but its 1 byte would go before the waiter: it queues.
        let behind = await Self.inLine(budget, project: 1, bytes: 1)
        let other = BodyByteBudget.Reservation(budget, project: 2)
        try await other.growWaiting(to: 40)
        #expect(other.held == 40)
        withExtendedLifetime(settled) {}
        settled.release()
        #expect(try await waiting.value == 10)
        #expect(try await behind.value == 1)
        withExtendedLifetime(other) {}
    }

    /// A request that holds nothing waits for bytes of a request still being received, but
    /// holds back no one meanwhile (a request that fits goes first) and waits at most the
    /// budget's patience: then it is refused with its reason. A request that holds bytes is
    /// refused at once.
    @Test func aWaiterForBytesBeingReceivedHoldsBackNoOneAndWaitsOnlyItsPatience() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock)
        let receiving = BodyByteBudget.Reservation(budget, project: 1)
        try receiving.grow(to: 40)
        let patient = await Self.inLine(budget, project: 1, bytes: 20)
        let small = BodyByteBudget.Reservation(budget, project: 1)
        try await small.growWaiting(to: 5)
        #expect(small.held == 5)
        await #expect(throws: APIError.self) { try await small.growWaiting(to: 15) }
        // The receiving one ends: the waiter is in, well within its patience.
        receiving.release()
        #expect(try await patient.value == 20)

        try receiving.grow(to: 25)
        let refused = Self.waiter(budget, project: 1, bytes: 25)
        while clock.sleeping < 1 { await Task.yield() }
        clock.advance(by: .seconds(1))
        await #expect(throws: APIError.self) { try await refused.value }
        #expect(budget.refusals.counts == ["project": 2])
        withExtendedLifetime((receiving, small)) {}
    }

    /// A request that holds nothing stays in line past its patience when, during it, the
    /// requests in its way settled: requests let in together after a group commit are all
    /// being read for a moment, and the line behind them must not be refused for that.
    @Test func aWaiterThatSawRoomComingStaysPastItsPatience() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock)
        let first = BodyByteBudget.Reservation(budget, project: 1)
        try first.grow(to: 25)
        let second = BodyByteBudget.Reservation(budget, project: 1)
        try second.grow(to: 25)
        let waiting = await Self.inLine(budget, project: 1, bytes: 30)
        first.settle(holding: 25, received: 25)
        second.settle(holding: 25, received: 25)
        // Their commits end; a request that does not wait takes the room the first gave back,
        // and is being read when the patience passes.
        first.release()
        let next = BodyByteBudget.Reservation(budget, project: 1)
        try next.grow(to: 25)
        second.release()
        while clock.sleeping < 1 { await Task.yield() }
        clock.advance(by: .seconds(1))
        await Self.settle()
        #expect(budget.waitingNow == 1)
        next.release()
        #expect(try await waiting.value == 30)
        #expect(budget.refusals.counts.isEmpty)
    }

    /// A wait for settled bytes ends, refused, at the budget's `maxWait`; a cancelled waiter
    /// leaves the line at once, and the one behind it moves up.
    @Test func aWaitEndsAtMaxWaitOrWhenCancelled() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock)
        let settled = try Self.settled(budget, project: 1, bytes: 50)
        let timedOut = Self.waiter(budget, project: 1, bytes: 30)
        // It waits for settled bytes: patient at every second, refused at the tenth.
        for _ in 0..<10 {
            while clock.sleeping < 1 { await Task.yield() }
            #expect(budget.waitingNow == 1)
            clock.advance(by: .seconds(1))
        }
        await #expect(throws: APIError.self) { try await timedOut.value }
        #expect(budget.refusals.counts == ["wait": 1])

        let cancelled = await Self.inLine(budget, project: 1, bytes: 30)
        let next = await Self.inLine(budget, project: 1, bytes: 20)
        cancelled.cancel()
        await #expect(throws: APIError.self) { try await cancelled.value }
        #expect(budget.waitingNow == 1)
        settled.shrink(to: 30)
        #expect(try await next.value == 20)
    }

    /// A request let in by its declared size takes what its body is expected to hold before
    /// reading: by the first ratio until a body was read (at most what it may hold), then by
    /// the ratio learned from settled bodies; it gives back what it did not use when it settles. A second request that would
    /// not fit whole waits before it holds anything, and is let in once the first settles.
    @Test func aRequestTakesTheRoomItsBodyIsExpectedToHoldBeforeReadingIt() async throws {
        let clock = TestClock()
        let budget = Self.budget(clock, limit: 200)
        // No body read yet: 8 times its declared bytes, compressed, at most what it may hold.
        let capped = BodyByteBudget.Reservation(budget, project: 3)
        try await capped.admit(declaredBytes: 10, compressed: true, atMost: 50)
        #expect(capped.held == 50)
        capped.release()
        let first = BodyByteBudget.Reservation(budget, project: 1)
        try await first.admit(declaredBytes: 10, compressed: true, atMost: 100)
        #expect(first.held == 80)
        // Its body held 50 bytes for 10 received: the 30 not used come back.
        first.settle(holding: 50, received: 10)
        #expect(budget.inUse(by: .project(1)) == 50)
        // Ratio 5: 8 bytes declared are expected to hold 40.
        let second = BodyByteBudget.Reservation(budget, project: 1)
        try await second.admit(declaredBytes: 8, compressed: true, atMost: 80)
        #expect(second.held == 40)
        // 50 + 40 + 40 > 100: the third waits for the first's settled bytes, holding nothing.
        let third = Task {
            let share = BodyByteBudget.Reservation(budget, project: 1)
            try await share.admit(declaredBytes: 8, compressed: true, atMost: 80)
            return withExtendedLifetime(share) { share.held }
        }
        while budget.waitingNow < 1 { await Task.yield() }
        #expect(budget.inUse(by: .project(1)) == 90)
        withExtendedLifetime(first) {}
        first.release()
        #expect(try await third.value == 40)
        // An uncompressed body: its own ratio, none learned yet (twice its declared bytes).
        let plain = BodyByteBudget.Reservation(budget, project: 2)
        try await plain.admit(declaredBytes: 10, compressed: false, atMost: 100)
        #expect(plain.held == 20)
        withExtendedLifetime((second, plain)) {}
    }
}
