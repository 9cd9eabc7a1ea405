import Logging
import PostgresNIO
import Synchronization

/// Runs `body` and returns its result, or throws ``DeadlineExceeded`` once `limit` has
/// passed, whichever comes first.
///
/// Unlike a task group, this returns at the deadline even when `body` ignores
/// cancellation (a database lease or query on a connection that died mid-restart): the
/// caller answers 503 and moves on, and `body` is cancelled and left to finish on its own.
/// That is safe here because every database write is idempotent: a commit that lands after
/// its request was answered 503 is counted as a duplicate when the client retries.
func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withDeadline(limit, clock: ContinuousClock(), body)
}

/// ``withDeadline(_:_:)`` with `limit` measured on `clock`: tests pass a clock they move, so
/// what happens at a deadline is tested without waiting for it in real time.
func withDeadline<T: Sendable, C: Clock>(
    _ limit: C.Duration, clock: C, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await race(body, whenCancelled: .returnAtOnce) {
        try? await clock.sleep(for: limit)
        return DeadlineExceeded()
    }
}

/// The deadline of ``withDeadline(_:_:)`` passed.
struct DeadlineExceeded: Error {}

extension PostgresClient {
    /// A transaction (``withTransactionClosingRefused(logger:_:)``) that ends once its connection closes, with
    /// ``ConnectionClosedMidTransaction`` unless the transaction's own error came first
    /// (``endingOnConnectionClose(whenCancelled:grace:_:)``).
    ///
    /// Cancelling the caller reaches the lease and `body` but does not stop waiting for the
    /// outcome: a write the caller stopped waiting for could still commit after a refusal.
    func withTransactionEndingOnClose<T: Sendable>(
        logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await endingOnConnectionClose(whenCancelled: .awaitOutcome) { leased in
            try await self.withTransactionClosingRefused(logger: logger) { connection in
                leased(connection)
                return try await body(connection)
            }
        }
    }
}

/// What a cancelled caller of ``endingOnConnectionClose(whenCancelled:grace:_:)`` does (a
/// cancelled caller of ``withDeadline(_:clock:_:)`` returns at once).
enum CancelledCaller {
    /// Waits for the outcome (writes).
    case awaitOutcome
    /// Returns at once with `CancellationError` (reads: nothing of theirs can land later).
    case returnAtOnce
}

/// Runs `work`, which leases one connection and hands it to `leased`, and returns its outcome,
/// or ``ConnectionClosedMidTransaction`` once that connection has closed and `grace` has
/// passed without one.
///
/// PostgresNIO 1.33 never answers a statement written to a connection whose channel has
/// closed: the statement's promise is dropped with the closed channel's pipeline, and its
/// caller waits forever, cancelled or not. A PostgreSQL restart between two statements of a
/// transaction does that. `work` runs in a task of its own and is left to its hung statement;
/// PostgreSQL rolled the transaction back when the connection ended, and a `COMMIT` whose
/// answer was lost is the caller's to handle, as with any connection error.
func endingOnConnectionClose<T: Sendable>(
    whenCancelled: CancelledCaller, grace: Duration = .milliseconds(200),
    _ work: @escaping @Sendable (_ leased: @escaping @Sendable (PostgresConnection) -> Void) async throws -> T
) async throws -> T {
    let leased = LeasedConnection()
    return try await race(
        { try await work { connection in leased.connection.withLock { $0 = connection } } }, whenCancelled: whenCancelled
    ) {
        // Polled, not a `closeFuture` callback: those stay registered for the life of the
        // pooled connection, one more per call.
        while !Task.isCancelled {
            try? await Task.sleep(for: grace)
            guard leased.connection.withLock({ $0?.isClosed }) == true else { continue }
            try? await Task.sleep(for: grace)
            return ConnectionClosedMidTransaction()
        }
        return nil
    }
}

/// Runs `body` in a task of its own and returns its outcome, or the error `rival` returns
/// first, whichever comes first: the one runner of ``withDeadline(_:clock:_:)`` (whose rival is
/// a timer) and ``endingOnConnectionClose(whenCancelled:grace:_:)`` (a closed connection).
///
/// `rival` runs in a task of its own too, cancelled once the race is decided; it returns `nil`
/// when cancelled. An error ends the race and cancels `body`, which is left to finish on its
/// own: the caller returns even when `body` ignores cancellation.
private func race<T: Sendable>(
    _ body: @escaping @Sendable () async throws -> T, whenCancelled: CancelledCaller,
    against rival: @escaping @Sendable () async -> (any Error)?
) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.start(continuation)
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                race.finish(result)
            }
            let rivalTask = Task {
                guard let error = await rival(), !Task.isCancelled else { return }
                race.finish(.failure(error))
            }
            race.track(work: work, rival: rivalTask)
        }
    } onCancel: {
        switch whenCancelled {
        case .awaitOutcome: race.cancelWork()
        case .returnAtOnce: race.finish(.failure(CancellationError()))
        }
    }
}

/// The connection a transaction leased, once it has one.
private final class LeasedConnection: Sendable {
    let connection = Mutex<PostgresConnection?>(nil)
}

/// The connection of a transaction closed and its statement was never answered
/// (``endingOnConnectionClose(whenCancelled:grace:_:)``): a connection error.
struct ConnectionClosedMidTransaction: Error, CustomStringConvertible {
    /// What a command-line tool prints and the logs say.
    var description: String { "the database closed the connection during a transaction (rolled back); try again" }
}

/// The first of work, rival (a timer or a closed connection) and cancellation to finish resumes
/// the caller, once.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var pending: Result<T, any Error>?
        var work: Task<Void, Never>?
        var rival: Task<Void, Never>?
        var done = false
        var workCancelled = false
    }

    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            if let pending = state.pending { return pending }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    func track(work: Task<Void, Never>, rival: Task<Void, Never>) {
        let (finished, cancelled) = state.withLock { state -> (Bool, Bool) in
            state.work = work
            state.rival = rival
            return (state.done, state.workCancelled)
        }
        if finished { rival.cancel() }
        if cancelled { work.cancel() }
    }

    /// Cancels the work, without resuming the caller.
    func cancelWork() {
        state.withLock { state in
            state.workCancelled = true
            return state.work
        }?.cancel()
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, rival, work) = state.withLock { state -> (CheckedContinuation<T, any Error>?, Task<Void, Never>?, Task<Void, Never>?) in
            guard !state.done else { return (nil, nil, nil) }
            state.done = true
            if state.continuation == nil { state.pending = result }
            defer { state.continuation = nil }
            return (state.continuation, state.rival, state.work)
        }
        rival?.cancel()
        if case .failure = result { work?.cancel() }
        continuation?.resume(with: result)
    }
}
