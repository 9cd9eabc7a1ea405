import Testing

@testable import CrashServer

/// This process's one-cycle-at-a-time gate (``RollupCycles``).
@Suite struct RollupCyclesTests {
    /// Starts a body that holds the gate until `release` yields (then runs `then`), and returns
    /// once it holds it: a caller started after this waits, whichever task the pool runs first.
    static func hold(
        _ cycles: RollupCycles, then: @escaping @Sendable () async throws -> Void = {}
    ) async -> (holder: Task<Void, any Error>, release: AsyncStream<Void>.Continuation) {
        let (entered, enter) = AsyncStream.makeStream(of: Void.self)
        let (released, release) = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            try await cycles.exclusively {
                enter.yield()
                for await _ in released { break }
            }
            try await then()
        }
        for await _ in entered { break }
        return (holder, release)
    }

    /// A reader waiting behind a cycle that does not end leaves when its task is cancelled (its
    /// request's deadline): it throws at once, and the queue no longer holds it.
    @Test func aCancelledWaiterLeavesTheQueue() async throws {
        let cycles = RollupCycles()
        let (holder, release) = await Self.hold(cycles)
        let waiter = Task { try await cycles.exclusively { "ran" } }
        while await cycles.waiters < 1 { await Task.yield() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(await cycles.waiters == 0)
        // The gate still serves the next caller, once the holder ends.
        release.yield()
        try await holder.value
        #expect(try await cycles.exclusively { "next" } == "next")
    }

    /// A reader whose turn has not come by its deadline (its wait budget) leaves the queue and
    /// throws; the cycle holding the gate is not disturbed, and the gate serves the next caller.
    @Test func aWaiterPastItsDeadlineLeavesTheQueue() async throws {
        let cycles = RollupCycles()
        let (holder, release) = await Self.hold(cycles)
        let started = ContinuousClock.now
        await #expect(throws: RollupCycles.TurnExpired.self) {
            try await cycles.exclusively(waitingUntil: started + .milliseconds(50)) { "ran" }
        }
        #expect(ContinuousClock.now - started >= .milliseconds(50))
        #expect(await cycles.waiters == 0)
        // A deadline already past still leaves through the queue, never taking a held gate.
        await #expect(throws: RollupCycles.TurnExpired.self) {
            try await cycles.exclusively(waitingUntil: started) { "ran" }
        }
        release.yield()
        try await holder.value
        // A free gate runs the body whatever the deadline: only waiting is bounded.
        #expect(try await cycles.exclusively(waitingUntil: started) { "next" } == "next")
    }

    /// Waiters run one at a time, in the order they asked.
    @Test func waitersRunInTurn() async throws {
        let cycles = RollupCycles()
        let (holder, release) = await Self.hold(cycles)
        var waiters: [Task<Int, any Error>] = []
        for n in 0..<3 {
            waiters.append(Task { try await cycles.exclusively { n } })
            while await cycles.waiters < n + 1 { await Task.yield() }
        }
        release.yield()
        try await holder.value
        for (n, waiter) in waiters.enumerated() { #expect(try await waiter.value == n) }
    }

    /// A waiter gets the gate from the cycle before it, ahead of that cycle's caller asking
    /// again at once (the aggregator catching up runs cycle after cycle): a reader waits for
    /// one cycle, not for the whole catch-up.
    @Test func aWaiterGoesBeforeTheHoldersNextCycle() async throws {
        for _ in 0..<20 {
            let cycles = RollupCycles()
            let order = Order()
            let (holder, release) = await Self.hold(cycles) {
                try await cycles.exclusively { await order.add("holder again") }
            }
            let waiter = Task { try await cycles.exclusively { await order.add("waiter") } }
            while await cycles.waiters < 1 { await Task.yield() }
            release.yield()
            try await holder.value
            try await waiter.value
            #expect(await order.names == ["waiter", "holder again"])
        }
    }
}

/// What ran, in order.
private actor Order {
    var names: [String] = []
    func add(_ name: String) { names.append(name) }
}
