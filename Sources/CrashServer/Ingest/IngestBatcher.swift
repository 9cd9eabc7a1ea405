import DequeModule
import Logging
import ServiceLifecycle
import Synchronization

/// Group commit: collects the reports of concurrent ingest requests and writes them in
/// one transaction, so the database sees a few large transactions instead of many
/// small ones. A request's `submit` returns only after the transaction holding its
/// reports has committed: acknowledged means durable.
///
/// The queue is bounded in reports; when it is full, or while the database is
/// unreachable, `submit` fails at once with 503 and nothing of the request is stored.
/// On graceful shutdown every queued request is still committed before `run` returns.
final class IngestBatcher: Service, Sendable {
    /// What became of one request's reports: `true` where newly stored, `false` for a duplicate.
    typealias Outcome = [Bool]

    private struct Job {
        var items: [IngestItem]
        var continuation: CheckedContinuation<Outcome, any Error>
    }

    private struct State {
        var queue: Deque<Job> = []
        var queuedReports = 0
        var draining = false
        var databaseDown = false
    }

    private let state = Mutex(State())
    private let wakeup: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation
    private let store: @Sendable ([IngestItem]) async throws -> Set<ReportKey>
    private let probe: @Sendable () async throws -> Void
    private let maxQueuedReports: Int
    private let maxBatchReports: Int
    private let timeout: Duration
    private let metrics: ServerMetrics
    private let logger: Logger

    /// - Parameters:
    ///   - store: writes one batch in one transaction; returns the keys newly stored.
    ///   - probe: a cheap query that succeeds once the database is reachable again.
    init(
        maxQueuedReports: Int,
        maxBatchReports: Int,
        timeout: Duration,
        metrics: ServerMetrics,
        logger: Logger,
        store: @escaping @Sendable ([IngestItem]) async throws -> Set<ReportKey>,
        probe: @escaping @Sendable () async throws -> Void
    ) {
        self.maxQueuedReports = maxQueuedReports
        self.maxBatchReports = maxBatchReports
        self.timeout = timeout
        self.metrics = metrics
        self.logger = logger
        self.store = store
        self.probe = probe
        (wakeup, wake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// `true` while the last database attempt failed; ingest answers 503 without trying.
    var isDatabaseDown: Bool { state.withLock { $0.databaseDown } }

    /// Reports waiting for a commit.
    var queuedReports: Int { state.withLock { $0.queuedReports } }

    /// Queues `items` and waits for the commit that stores them.
    func submit(_ items: [IngestItem]) async throws -> Outcome {
        guard !items.isEmpty else { return [] }
        return try await withCheckedThrowingContinuation { continuation in
            let refusal: APIError? = state.withLock { state in
                if state.draining { return .unavailable("server is shutting down", retryAfter: 5) }
                if state.databaseDown { return .unavailable("database unreachable", retryAfter: 5) }
                if state.queuedReports + items.count > maxQueuedReports {
                    return .unavailable("ingest queue is full", retryAfter: 1)
                }
                state.queue.append(Job(items: items, continuation: continuation))
                state.queuedReports += items.count
                return nil
            }
            if let refusal {
                continuation.resume(throwing: refusal)
            } else {
                metrics.recordQueueDepth(queuedReports)
                wake.yield()
            }
        }
    }

    /// Commits batches until graceful shutdown, then commits what is queued and returns.
    /// Meanwhile probes the database once a second while it is marked down.
    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    await self.probeUntilUp()
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            await withGracefulShutdownHandler {
                for await _ in self.wakeup {
                    await self.drain()
                }
            } onGracefulShutdown: {
                self.state.withLock { $0.draining = true }
                self.wake.finish()
            }
            await self.drain()
            group.cancelAll()
        }
        // Nothing can be queued once draining is set; fail anything left defensively.
        let left = state.withLock { state -> Deque<Job> in
            defer { state.queue.removeAll() }
            return state.queue
        }
        for job in left { job.continuation.resume(throwing: APIError.unavailable("server is shutting down")) }
    }

    /// Commits every queued job, in batches of at most `maxBatchReports`.
    private func drain() async {
        while let jobs = takeBatch() {
            await commit(jobs)
        }
    }

    private func takeBatch() -> [Job]? {
        state.withLock { state in
            guard !state.queue.isEmpty else { return nil }
            var jobs: [Job] = []
            var count = 0
            while let next = state.queue.first, jobs.isEmpty || count + next.items.count <= maxBatchReports {
                jobs.append(state.queue.removeFirst())
                count += next.items.count
            }
            state.queuedReports -= count
            return jobs
        }
    }

    private func commit(_ jobs: [Job]) async {
        // One item per key across the batch: the first occurrence is the one stored.
        var seen = Set<ReportKey>()
        var unique: [IngestItem] = []
        for job in jobs {
            for item in job.items where seen.insert(item.key).inserted { unique.append(item) }
        }
        let started = ContinuousClock.now
        do {
            let batch = unique
            let fresh = try await withDeadline(timeout) { try await self.store(batch) }
            metrics.recordCommit(reports: batch.count, duration: ContinuousClock.now - started)
            var claimed = Set<ReportKey>()
            for job in jobs {
                let outcome = job.items.map { item in fresh.contains(item.key) && claimed.insert(item.key).inserted }
                job.continuation.resume(returning: outcome)
            }
            if state.withLock({ $0.databaseDown }) {
                state.withLock { $0.databaseDown = false }
                logger.notice("database reachable again")
            }
        } catch {
            let refusal: APIError
            if isConnectionError(error) {
                refusal = .unavailable("database unreachable", retryAfter: 5)
                markDown(error)
            } else {
                logger.error("ingest transaction failed", metadata: ["error.message": "\(String(reflecting: error))"])
                refusal = .unavailable("could not store reports; retry later", retryAfter: 5)
            }
            for job in jobs { job.continuation.resume(throwing: refusal) }
        }
    }

    /// Marks the database unreachable: ingest answers 503 at once until a probe succeeds.
    func markDown(_ error: any Error) {
        let wasDown = state.withLock { state in
            defer { state.databaseDown = true }
            return state.databaseDown
        }
        guard !wasDown else { return }
        logger.warning("database unreachable; ingest answers 503 until it is back", metadata: ["error.message": "\(error)"])
    }

    /// While the database is marked down, probes it once a second and clears the mark
    /// when it answers.
    private func probeUntilUp() async {
        while state.withLock({ $0.databaseDown }), !Task.isCancelled {
            do {
                try await withDeadline(.seconds(2)) { try await self.probe() }
                state.withLock { $0.databaseDown = false }
                logger.notice("database reachable again")
            } catch {
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
