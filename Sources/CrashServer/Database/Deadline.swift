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
    let race = DeadlineRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.start(continuation)
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                race.finish(result)
            }
            let timer = Task {
                try? await clock.sleep(for: limit)
                guard !Task.isCancelled else { return }
                work.cancel()
                race.finish(.failure(DeadlineExceeded()))
            }
            race.track(work: work, timer: timer)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The deadline of ``withDeadline(_:_:)`` passed.
struct DeadlineExceeded: Error {}

/// The first of work, timer and cancellation to finish resumes the caller, once.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var pending: Result<T, any Error>?
        var work: Task<Void, Never>?
        var timer: Task<Void, Never>?
        var done = false
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

    func track(work: Task<Void, Never>, timer: Task<Void, Never>) {
        let finished = state.withLock { state -> Bool in
            state.work = work
            state.timer = timer
            return state.done
        }
        if finished { timer.cancel() }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, timer, work) = state.withLock { state -> (CheckedContinuation<T, any Error>?, Task<Void, Never>?, Task<Void, Never>?) in
            guard !state.done else { return (nil, nil, nil) }
            state.done = true
            if state.continuation == nil { state.pending = result }
            defer { state.continuation = nil }
            return (state.continuation, state.timer, state.work)
        }
        timer?.cancel()
        if case .failure = result { work?.cancel() }
        continuation?.resume(with: result)
    }
}
