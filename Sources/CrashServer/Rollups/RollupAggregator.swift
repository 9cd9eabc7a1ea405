import Logging
import ServiceLifecycle
import Synchronization

/// Folds the rollup facts that ingest appends to `rollup_pending` into the rollups
/// (``RollupStore/aggregate()``): at least every `interval`, and again at once while a cycle
/// was full, so under load the tail stays within a cycle or two of reports. Only the server
/// that holds the aggregator's advisory lock folds; the others find it held and stand by,
/// trying again at their next interval (docs/server.md, "The rollup aggregator").
struct RollupAggregator: Service {
    let store: any RollupStore
    /// This process's one-cycle-at-a-time gate, shared with the readers (``RollupFreshness``).
    let cycles: RollupCycles
    let schemaApplied: ReadyFlag
    /// `CRASHGUARD_ROLLUP_INTERVAL`.
    let interval: Duration
    let clock: any Clock<Duration>
    let metrics: ServerMetrics?
    let logger: Logger

    init(
        store: any RollupStore, cycles: RollupCycles, schemaApplied: ReadyFlag, interval: Duration,
        clock: any Clock<Duration> = ContinuousClock(), metrics: ServerMetrics? = nil, logger: Logger
    ) {
        (self.store, self.cycles, self.schemaApplied, self.interval) = (store, cycles, schemaApplied, interval)
        (self.clock, self.metrics, self.logger) = (clock, metrics, logger)
    }

    /// Waits an interval, catches up, and again: the first cycle comes an interval after the
    /// start (what was pending before is folded then, or by the first query that needs it).
    func run() async throws {
        await PollingService.waitForSchema(schemaApplied)
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            try? await cancelWhenGracefulShutdown { try await clock.sleep(for: interval, tolerance: nil) }
            guard !Task.isCancelled, !Task.isShuttingDownGracefully else { return }
            do {
                try await catchUp()
            } catch {
                logger.warning("rollups not aggregated; retrying", metadata: ["error.message": "\(String(reflecting: error))"])
            }
        }
    }

    /// Runs cycles until one is not full (nothing is left for another at once), another server
    /// holds the lock, or shutdown begins; returns the last one.
    @discardableResult
    func catchUp() async throws -> RollupCycle {
        while true {
            let cycle = try await runCycle()
            guard case .folded(_, _, let full) = cycle, full, !Task.isShuttingDownGracefully else { return cycle }
        }
    }

    /// One cycle, then the metrics.
    func runCycle() async throws -> RollupCycle {
        let cycle = try await cycles.exclusively { try await store.aggregate() }
        if let metrics { metrics.recordRollups(cycle, tail: try await store.tail()) }
        return cycle
    }
}

/// Read-your-writes over the rollups: a reader that calls ``awaitFolded(project:atMost:)`` before
/// it reads them sees every report committed before the call (a 202 is sent after the commit).
///
/// When rows of the project are pending, it runs a cycle itself (through this process's gate,
/// so it waits for a cycle in progress and starts none that another reader's already did) until
/// those rows are folded; while another server holds the aggregator's lock it polls until that
/// server has folded them. A request's reader waits at most its budget, and then reads the
/// rollups as they stand: after a burst, when the aggregator is seconds behind, a page answers
/// a moment short of the newest reports rather than not at all (docs/server.md,
/// "Read-your-writes"). A project with nothing pending costs one indexed probe.
struct RollupFreshness: Sendable {
    let store: any RollupStore
    let cycles: RollupCycles

    /// Time between two probes while another server folds.
    static let standbyPoll: Duration = .milliseconds(10)

    /// Returns true once every rollup fact of `project` (nil: of every project) that was pending
    /// at the call is folded; false once `budget` has passed first (nil: no budget but the
    /// caller's deadline, as a cancelled wait throws). A cycle this reader runs itself is never
    /// cut short by the budget: its work is the aggregator's, and a cut one would be redone.
    @discardableResult
    func awaitFolded(project: Int64?, atMost budget: Duration? = nil) async throws -> Bool {
        guard let last = try await store.lastPending(project: project) else { return true }
        let deadline = budget.map { ContinuousClock.now + $0 }
        do {
            while true {
                let cycle = try await cycles.exclusively(waitingUntil: deadline) { () async throws -> RollupCycle? in
                    try await store.isPending(project: project, upTo: last) ? try await store.aggregate() : nil
                }
                guard let cycle else { return true }
                if let deadline, ContinuousClock.now >= deadline { throw RollupCycles.TurnExpired() }
                if cycle == .standby { try await Task.sleep(for: Self.standbyPoll) }
            }
        } catch is RollupCycles.TurnExpired {
            cycles.countExpiredWait()
            return false
        }
    }
}

/// One aggregator cycle at a time in this process: the service's and those readers run
/// (``RollupFreshness``), in the order they asked. Across servers the advisory lock decides.
///
/// A waiter whose task is cancelled (its request's deadline, shutdown) leaves the queue at once
/// and throws `CancellationError`; the bodies themselves end when their connection does
/// (``PostgresRollupStore/aggregate(afterTaking:)``), so no cycle holds the gate for good.
actor RollupCycles {
    private var busy = false
    private var waiting: [(ticket: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
    private var nextTicket: UInt64 = 0
    private let expiredWaits = Mutex(0)

    init() {}

    /// A caller's turn had not come by the instant it would wait until.
    struct TurnExpired: Error {}

    /// Runs `body` once no other body of this gate is running. A caller still waiting at
    /// `deadline` leaves the queue and throws ``TurnExpired``; a body that has begun runs to
    /// its end whatever the deadline.
    ///
    /// An ending body hands the gate to the first waiter (it stays busy): were it only marked
    /// free, a caller asking again at once (the aggregator's next cycle while it catches up)
    /// would take it before the waiter it woke, and a reader would wait for the whole catch-up,
    /// past its deadline under steady load.
    func exclusively<T: Sendable>(
        waitingUntil deadline: ContinuousClock.Instant? = nil, _ body: @Sendable () async throws -> T
    ) async throws -> T {
        if busy { try await waitForTurn(until: deadline) } else { busy = true }
        defer {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().continuation.resume() }
        }
        return try await body()
    }

    /// The callers waiting for the gate.
    var waiters: Int { waiting.count }

    /// How many readers stopped waiting for the folding at their budget
    /// (``RollupFreshness/awaitFolded(project:atMost:)``); `/metrics` shows it.
    nonisolated var expiredWaitCount: Int { expiredWaits.withLock { $0 } }

    nonisolated func countExpiredWait() { expiredWaits.withLock { $0 += 1 } }

    /// Returns holding the gate, handed over by the body before (or throws, not holding it).
    private func waitForTurn(until deadline: ContinuousClock.Instant?) async throws {
        let ticket = nextTicket
        nextTicket += 1
        let timer = deadline.map { deadline in
            Task {
                try await Task.sleep(until: deadline, clock: .continuous)
                self.leave(ticket, throwing: TurnExpired())
            }
        }
        defer { timer?.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    waiting.append((ticket, continuation))
                }
            }
        } onCancel: {
            Task { await self.leave(ticket, throwing: CancellationError()) }
        }
    }

    /// A waiter leaves the queue, cancelled or past its deadline (it may already have been
    /// given its turn, and then stays).
    private func leave(_ ticket: UInt64, throwing error: any Error) {
        guard let index = waiting.firstIndex(where: { $0.ticket == ticket }) else { return }
        waiting.remove(at: index).continuation.resume(throwing: error)
    }
}

extension CrashDatabase {
    /// Read-your-writes over this database's rollups (``RollupFreshness``).
    var rollupFreshness: RollupFreshness {
        RollupFreshness(store: PostgresRollupStore(database: self), cycles: rollupCycles)
    }
}
