import Logging
import ServiceLifecycle
import Synchronization

/// Group commit: collects the reports of concurrent ingest requests and writes them in
/// one transaction, so the database sees a few large transactions instead of many
/// small ones. A request's `submit` returns only after the transaction holding its
/// reports has committed: acknowledged means durable.
///
/// What is admitted, what makes a batch and what waited too long is decided by an
/// ``IngestQueue`` (no tasks, no I/O): the queue is bounded in reports (a request is admitted
/// while the queue is below the bound, so it holds at most the bound plus one request); when it
/// is full, or while the database is unreachable, `submit` fails at once with 503 and nothing
/// of the request is stored. A batch is bounded in reports and in estimated bytes
/// (``IngestItem/estimatedBytes``), so that its statements stay far below PostgreSQL's 1 GB
/// message limit. The batcher holds the queue under a lock and runs the committers, the
/// deadlines and the probe. On graceful shutdown every queued request is still committed
/// before `run` returns.
///
/// Lanes: each lane is a queue with its own committer, so that as many transactions are in
/// flight. A request whose reports are all of one group goes to that group's lane, any other
/// to the first (``IngestLanes/lane(of:lanes:)``), so two lanes never hold one-group requests
/// of the same group; the queue bound, the database-down mark and the deadline are shared by
/// the lanes (docs/server.md, "Lanes").
///
/// A 503 means nothing was stored (docs/server.md, "Database timeouts"): a lock wait or a
/// slow statement is ended and rolled back by PostgreSQL itself before the deadline ("database
/// busy", this batch only); past the deadline a transaction that has not sent `COMMIT` is
/// abandoned (``CommitGate``) and answered 503 at once if the database does not answer a probe,
/// else after three deadlines at most; a `COMMIT` never answered is a 500 "outcome unknown".
/// Nothing here waits on the database without a bound: a call that never returns does not
/// hold the batcher.
final class IngestBatcher: Service, Sendable {
    /// What became of one request's reports: `true` where newly stored, `false` for a duplicate.
    typealias Outcome = [Bool]

    /// Writes one batch in one transaction, sending `COMMIT` only if the gate lets it; returns
    /// the keys newly stored.
    typealias Store = @Sendable ([IngestItem], CommitGate) async throws -> Set<ReportKey>

    /// The queue's decisions (admission, batches, expiry, the down mark); the batcher does the
    /// waiting and the transactions.
    private typealias Queue = IngestQueue<CheckedContinuation<Outcome, any Error>, ContinuousClock>

    private let state: Mutex<Queue>
    /// One wake-up stream per lane.
    private let wakeups: [(stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)]
    private let store: Store
    private let probe: @Sendable () async throws -> Void
    private let timeout: Duration
    /// Measures the transaction's deadlines (``settledStore(_:)``); tests pass a clock they move.
    private let clock: any Clock<Duration>
    private let metrics: ServerMetrics
    private let logger: Logger
    /// The queue's 503s, counted and logged at a bounded rate: `admission` (the queue is full,
    /// draining or the database marked down) and `queued` (refused when its batch was taken:
    /// it waited a whole deadline, or the database went down meanwhile).
    let refusals: RefusalLog

    /// - Parameters:
    ///   - maxBatchBytes: most estimated bytes in one transaction; a single request over it
    ///     still goes, alone.
    ///   - timeout: the deadline of one transaction (`CRASHGUARD_DB_TIMEOUT`), and the longest
    ///     a request waits in the queue before it is refused.
    ///   - store: writes one batch in one transaction; see ``Store``. With several lanes it is
    ///     called for several batches at once.
    ///   - lanes: transactions in flight at once (`CRASHGUARD_INGEST_LANES`); one lane is a
    ///     single committer.
    ///   - probe: a cheap query that succeeds once the database is reachable again.
    ///   - clock: measures the transaction's deadlines and the probe's.
    init(
        maxQueuedReports: Int,
        maxBatchReports: Int,
        maxBatchBytes: Int,
        timeout: Duration,
        metrics: ServerMetrics,
        logger: Logger,
        store: @escaping Store,
        lanes: Int = 1,
        probe: @escaping @Sendable () async throws -> Void,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.timeout = timeout
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        self.store = store
        self.probe = probe
        refusals = RefusalLog(subject: "ingest queue", logger: logger)
        metrics.observeRefusals(refusals, label: "crashguard_ingest_queue_refusals_total")
        let limits = Queue.Limits(
            maxQueuedReports: maxQueuedReports, maxBatchReports: maxBatchReports, maxBatchBytes: maxBatchBytes, timeout: timeout)
        let queue = Queue(limits: limits, lanes: lanes, clock: ContinuousClock())
        state = Mutex(queue)
        wakeups = (0..<queue.lanes).map { _ in AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1)) }
    }

    /// `true` while the last database attempt failed; ingest answers 503 without trying.
    var isDatabaseDown: Bool { state.withLock { $0.isDatabaseDown } }

    /// Reports waiting for a commit.
    var queuedReports: Int { state.withLock { $0.queuedReports } }

    /// Queues `items` and waits for the commit that stores them.
    func submit(_ items: [IngestItem]) async throws -> Outcome {
        guard !items.isEmpty else { return [] }
        return try await withCheckedThrowingContinuation { continuation in
            switch state.withLock({ $0.submit(items, waiter: continuation) }) {
            case .success(let lane): wakeups[lane].continuation.yield()
            case .failure(let refusal):
                refusals.record("admission", refusal.message)
                continuation.resume(throwing: refusal)
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
                await withTaskGroup(of: Void.self) { lanes in
                    for lane in self.wakeups.indices {
                        lanes.addTask {
                            for await _ in self.wakeups[lane].stream {
                                await self.drain(lane)
                            }
                            await self.drain(lane)
                        }
                    }
                }
            } onGracefulShutdown: {
                self.state.withLock { $0.startDraining() }
                for wakeup in self.wakeups { wakeup.continuation.finish() }
            }
            group.cancelAll()
        }
        // Nothing can be queued once draining is set; fail anything left defensively.
        for waiter in state.withLock({ $0.removeAll() }) {
            waiter.resume(throwing: APIError.unavailable("server is shutting down"))
        }
    }

    /// Commits every queued job of `lane`, batch by batch (``IngestQueue/nextBatch(lane:)``).
    private func drain(_ lane: Int) async {
        while let batch = state.withLock({ $0.nextBatch(lane: lane) }) {
            for (waiter, refusal) in batch.refused {
                refusals.record("queued", refusal.message)
                waiter.resume(throwing: refusal)
            }
            guard !batch.jobs.isEmpty else { continue }
            await commit(batch)
        }
    }

    private func commit(_ batch: Queue.Batch) async {
        let items = batch.items
        let started = ContinuousClock.now
        switch await settledStore(items) {
        case .success(let fresh):
            metrics.recordCommit(reports: items.count, duration: ContinuousClock.now - started)
            for (waiter, outcome) in batch.outcomes(fresh: fresh) { waiter.resume(returning: outcome) }
            markUp()
        case .failure(let refusal):
            for job in batch.jobs { job.waiter.resume(throwing: refusal) }
        }
    }

    /// Stores `batch` and says what became of it, within three deadlines and a 2 s probe
    /// whatever the database or the driver does.
    ///
    /// Within the deadline, the store's own answer. Past it, if `COMMIT` was not sent and the
    /// database does not answer a probe, it is unreachable: the transaction is abandoned
    /// (``CommitGate``: it can no longer commit) and the answer is 503 at once, without waiting
    /// for it. Otherwise the transaction is slow, not stuck (a busy disk, a CPU-starved
    /// server: the fault smoke's debug server at load 10 took 10-15 s for 1000 reports, with
    /// PostgreSQL idle in the transaction, waiting for it), and rolling it back would only make
    /// the retry redo the work: it gets until three deadlines from its start. Then it is
    /// abandoned if `COMMIT` was not sent (503 "database busy": rolled back); if `COMMIT` was
    /// sent and never answered, the outcome is unknown: 500, and the client's retry is counted
    /// once (the `report_ids` ledger).
    private func settledStore(_ batch: [IngestItem]) async -> Result<Set<ReportKey>, APIError> {
        await settledStore(batch, on: clock)
    }

    private func settledStore(_ batch: [IngestItem], on clock: some Clock<Duration>) async -> Result<Set<ReportKey>, APIError> {
        let gate = CommitGate()
        let started = clock.now
        let work = Task { try await self.store(batch, gate) }
        if let outcome = await outcome(of: work, within: timeout) { return outcome }
        if !gate.isCommitting, !(await probeAnswers()), gate.abandon() {
            return .failure(giveUp(work, gate, committing: false, reachable: false))
        }
        logger.warning("ingest transaction past the deadline; waiting for it until three deadlines")
        if let outcome = await outcome(of: work, within: timeout * 3 - started.duration(to: clock.now)) { return outcome }
        let committing = !gate.abandon()
        return .failure(giveUp(work, gate, committing: committing, reachable: await probeAnswers()))
    }

    /// The store's outcome if it ends within `limit`; `nil` if it does not.
    private func outcome(of work: Task<Set<ReportKey>, any Error>, within limit: Duration) async -> Result<Set<ReportKey>, APIError>? {
        guard let result = try? await withDeadline(max(limit, .zero), clock: clock, { await work.result }) else { return nil }
        return result.mapError(refusal(for:))
    }

    /// `true` when the database answers the probe within 2 s.
    private func probeAnswers() async -> Bool {
        (try? await withDeadline(.seconds(2), clock: clock) { try await self.probe() }) != nil
    }

    /// Stops waiting for a transaction: closes its connection (so a call hung on it fails),
    /// marks the database down unless it answered a probe, and answers 503 (nothing
    /// committed) or, with `committing`, 500 (outcome unknown).
    private func giveUp(_ work: Task<Set<ReportKey>, any Error>, _ gate: CommitGate, committing: Bool, reachable: Bool) -> APIError {
        work.cancel()
        gate.release()
        if !reachable { markDown(DeadlineExceeded()) }
        if committing {
            logger.error("ingest COMMIT unanswered: outcome unknown")
            return Self.outcomeUnknown
        }
        logger.warning("ingest transaction abandoned before its COMMIT", metadata: ["db.reachable": "\(reachable)"])
        return reachable ? .databaseBusy : .databaseUnreachable
    }

    /// The answer for a batch whose store failed.
    private func refusal(for error: any Error) -> APIError {
        if error is CommitOutcomeUnknown {
            logger.error("ingest connection failed while COMMIT was in flight: outcome unknown", metadata: ["error.message": "\(error)"])
            markDown(error)
            return Self.outcomeUnknown
        }
        if isTimeoutError(error) {
            // Lock or statement timeout: rolled back by the database, which is up.
            logger.warning("ingest transaction timed out in the database", metadata: ["error.message": "\(error)"])
            return .unavailable("database busy; retry later", retryAfter: 1)
        }
        if isConnectionError(error) {
            markDown(error)
            return .databaseUnreachable
        }
        logger.error("ingest transaction failed", metadata: ["error.message": "\(String(reflecting: error))"])
        return .unavailable("could not store reports; retry later", retryAfter: 5)
    }

    /// The answer when a batch's `COMMIT` was sent and never answered: not 503, which promises
    /// that nothing was stored; a retry is safe (the `report_ids` ledger counts an id once).
    static let outcomeUnknown = APIError.outcomeUnknown(
        "the database did not answer the commit: the reports may or may not be stored; retry (a report id is never counted twice)",
        retryAfter: 5)

    /// Marks the database unreachable when `error` is a failed connection
    /// (``isConnectionError(_:)``, which counts no answer within the deadline): ingest answers
    /// 503 at once until a probe succeeds. Any other error (a lock or statement timeout, a
    /// query the database refused) leaves it up.
    func markDown(_ error: any Error) {
        guard isConnectionError(error) || error is CommitOutcomeUnknown else { return }
        guard state.withLock({ $0.markDown() }) else { return }
        logger.warning("database unreachable; ingest answers 503 until it is back", metadata: ["error.message": "\(error)"])
    }

    /// While the database is marked down, probes it once a second and clears the mark
    /// when it answers.
    private func probeUntilUp() async {
        while isDatabaseDown, !Task.isCancelled {
            if await probeAnswers() {
                markUp()
            } else {
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Clears the down mark (a commit or a probe reached the database), saying so once.
    private func markUp() {
        if state.withLock({ $0.markUp() }) { logger.notice("database reachable again") }
    }
}

/// The connection failed after `COMMIT` was sent and before its answer: the batch may or may
/// not be stored.
struct CommitOutcomeUnknown: Error, CustomStringConvertible {
    let underlying: any Error
    var description: String { "COMMIT outcome unknown: \(underlying)" }
}
