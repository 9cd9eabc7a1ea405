import DequeModule

/// The group-commit queue's decisions, without tasks, I/O or locks: which request is admitted,
/// which requests make the next batch of a lane, which waited too long, and what each request's
/// reports became once its batch committed. ``IngestBatcher`` holds one under a lock and does
/// the waiting, the transactions and the answers.
///
/// Generic over its clock, as postgres-nio's `PoolStateMachine` is: the batcher runs it on
/// `ContinuousClock`, the tests on a clock they move by hand, so expiry is tested without
/// sleeping. `Waiter` is whatever the caller resumes with a request's answer (the batcher's
/// continuations; plain values in tests).
///
/// The rules (docs/server.md, "Group commit" and "Lanes"):
/// - **Admission**: a request is admitted while the queued reports are below
///   ``Limits/maxQueuedReports``, whatever its size, so the queue holds at most the bound plus
///   one request; refused with 503 when full, while draining and while the database is marked
///   down.
/// - **Batches**: a lane's queued requests in order while the batch stays within
///   ``Limits/maxBatchReports`` and ``Limits/maxBatchBytes``; the first request always goes,
///   alone when it is larger than the bytes bound.
/// - **Expiry**: a request that waited ``Limits/timeout`` or longer when its batch is taken is
///   refused before any transaction, so no answer comes later than the queue's deadline plus
///   the transaction's.
/// - **Database down**: a batch taken while the database is marked down is refused whole,
///   without a try.
struct IngestQueue<Waiter, C: Clock> where C.Duration == Duration {
    /// What became of one request's reports: `true` where newly stored, `false` for a duplicate.
    typealias Outcome = [Bool]

    struct Limits: Sendable {
        /// Queued reports at or above which a request is refused.
        var maxQueuedReports: Int
        /// Most reports in one batch (the first request of a batch goes whatever its size).
        var maxBatchReports: Int
        /// Most estimated bytes (``IngestItem/estimatedBytes``) in one batch; a single request
        /// over it still goes, alone.
        var maxBatchBytes: Int
        /// The longest a request waits in the queue before it is refused.
        var timeout: Duration
    }

    /// One queued request.
    struct Job {
        var items: [IngestItem]
        /// The items' estimated bytes, for the batch's byte bound.
        var bytes: Int
        /// When it was queued: a job that waited a whole deadline is refused, not stored.
        var queued: C.Instant
        var waiter: Waiter
    }

    /// The next batch of a lane: the requests refused without a try, and those whose reports
    /// go into one transaction.
    struct Batch {
        /// Refused before any transaction, each with its answer.
        var refused: [(waiter: Waiter, refusal: APIError)] = []
        /// The requests whose reports the transaction stores.
        var jobs: [Job] = []

        /// The items to store: one per ``ReportKey`` across the batch, the first occurrence.
        var items: [IngestItem] {
            var seen = Set<ReportKey>()
            var unique: [IngestItem] = []
            for job in jobs {
                for item in job.items where seen.insert(item.key).inserted { unique.append(item) }
            }
            return unique
        }

        /// Each request's outcome once the transaction stored the keys `fresh`: a report is new
        /// for the first request of the batch that holds its key, a duplicate everywhere else.
        func outcomes(fresh: Set<ReportKey>) -> [(waiter: Waiter, outcome: Outcome)] {
            var claimed = Set<ReportKey>()
            return jobs.map { job in
                (job.waiter, job.items.map { item in fresh.contains(item.key) && claimed.insert(item.key).inserted })
            }
        }
    }

    let limits: Limits
    let clock: C
    /// One queue per lane.
    private var queues: [Deque<Job>]
    /// Reports waiting for a commit, in every lane.
    private(set) var queuedReports = 0
    /// Set on graceful shutdown: nothing more is admitted; what is queued is still committed.
    private(set) var isDraining = false
    /// Set while the last database attempt failed: ingest answers 503 without trying.
    private(set) var isDatabaseDown = false

    init(limits: Limits, lanes: Int, clock: C) {
        self.limits = limits
        self.clock = clock
        queues = Array(repeating: [], count: max(1, lanes))
    }

    var lanes: Int { queues.count }

    /// Queues `items` for `waiter` in their lane (``IngestLanes/lane(of:lanes:)``) and returns
    /// the lane to wake, or the refusal to answer at once (nothing queued).
    mutating func submit(_ items: [IngestItem], waiter: Waiter) -> Result<Int, APIError> {
        if isDraining { return .failure(.unavailable("server is shutting down", retryAfter: 5)) }
        if isDatabaseDown { return .failure(.databaseUnreachable) }
        // Admitted while the queue is below its bound, whatever the request's size: a
        // 1000-report request waits for room no longer than a single report does ("fits whole"
        // starves a large request while small ones keep the queue nearly full).
        if queuedReports >= limits.maxQueuedReports { return .failure(.unavailable("ingest queue is full", retryAfter: 1)) }
        let lane = IngestLanes.lane(of: items, lanes: lanes)
        let bytes = items.reduce(0) { $0 + $1.estimatedBytes }
        queues[lane].append(Job(items: items, bytes: bytes, queued: clock.now, waiter: waiter))
        queuedReports += items.count
        return .success(lane)
    }

    /// Takes the next batch of `lane`; `nil` when the lane is empty. The batch's requests leave
    /// the queue whatever becomes of them: refused at once while the database is down or when
    /// they waited a whole deadline, else stored together.
    mutating func nextBatch(lane: Int) -> Batch? {
        guard !queues[lane].isEmpty else { return nil }
        var taken: [Job] = []
        var reports = 0
        var bytes = 0
        while let next = queues[lane].first,
            taken.isEmpty || (reports + next.items.count <= limits.maxBatchReports && bytes + next.bytes <= limits.maxBatchBytes)
        {
            taken.append(queues[lane].removeFirst())
            reports += next.items.count
            bytes += next.bytes
        }
        queuedReports -= reports
        var batch = Batch()
        // Marked down while these waited (an earlier batch found it unreachable): refused at
        // once rather than each batch waiting out the deadline in turn.
        if isDatabaseDown {
            batch.refused = taken.map { ($0.waiter, .databaseUnreachable) }
            return batch
        }
        // A job that waited a whole deadline (the batches before it were slow) is refused before
        // any transaction: so a request is answered within 4 x the deadline (queue, transaction)
        // plus two 2 s probes, before a proxy in front gives up on it.
        let now = clock.now
        for job in taken {
            if job.queued.duration(to: now) >= limits.timeout {
                batch.refused.append((job.waiter, .unavailable("database busy; retry later", retryAfter: 1)))
            } else {
                batch.jobs.append(job)
            }
        }
        return batch
    }

    /// Marks the database unreachable; `true` when it was not marked yet.
    mutating func markDown() -> Bool {
        defer { isDatabaseDown = true }
        return !isDatabaseDown
    }

    /// Clears the down mark; `true` when it was set.
    mutating func markUp() -> Bool {
        defer { isDatabaseDown = false }
        return isDatabaseDown
    }

    /// Admits nothing more; what is queued is still taken by ``nextBatch(lane:)``.
    mutating func startDraining() { isDraining = true }

    /// Empties every lane and returns the waiters of what was still queued.
    mutating func removeAll() -> [Waiter] {
        let left = queues.flatMap { $0.map(\.waiter) }
        for lane in queues.indices { queues[lane].removeAll() }
        queuedReports = 0
        return left
    }
}

extension IngestQueue: Sendable where Waiter: Sendable {}
extension IngestQueue.Job: Sendable where Waiter: Sendable {}

/// Which lane a request's reports go to.
enum IngestLanes {
    /// The lane of a request: the one of its group when all its reports are of one group
    /// (a single report, a Sentry event), so that two lanes' one-group requests never create
    /// or lock the same group; lane 0 for any other request (which may still meet a one-group
    /// request of another lane on a group: docs/server.md, "Lanes").
    static func lane(of items: [IngestItem], lanes: Int) -> Int {
        guard lanes > 1, let group = items.first?.groupKey, items.allSatisfy({ $0.groupKey == group }) else { return 0 }
        return Int(UInt(bitPattern: group.hashValue) % UInt(lanes))
    }
}
