import Synchronization

/// Decides, for one group-commit transaction, which came first: its `COMMIT` or the
/// batcher's deadline. The transaction asks ``commit()`` right before sending `COMMIT`; the
/// batcher asks ``abandon()`` when the deadline passes. One lock decides, so exactly one
/// of these holds:
///
/// - abandoned first: `COMMIT` is never sent (``commit()`` throws and the transaction rolls
///   back, or its connection is closed), so the batcher may answer 503 at once without
///   waiting for the transaction to end;
/// - `COMMIT` sent first: only the database's answer to it tells whether the reports are
///   stored, and the batcher waits for that answer (bounded; see `IngestBatcher`).
///
/// A `COMMIT` that failed with the database's answer (a deadlock retried, say) is followed by
/// ``begin(release:)`` again, which reopens the gate for the next attempt.
final class CommitGate: Sendable {
    private enum Phase {
        /// The transaction runs; `COMMIT` not sent.
        case open
        /// `COMMIT` sent (or about to be): the outcome is the database's answer.
        case committing
        /// The deadline came first: this batch is never committed.
        case abandoned
    }

    private struct State {
        var phase = Phase.open
        /// Closes the transaction's connection, without waiting for it.
        var release: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    /// The batch's transaction (or a retry of it) has its connection. `release` closes that
    /// connection: called when the batcher gives up on the transaction, so that a call hung on
    /// it fails and its lease ends. Throws ``DeadlineExceeded`` once abandoned.
    func begin(release: @escaping @Sendable () -> Void) throws {
        try state.withLock { state in
            guard state.phase != .abandoned else { throw DeadlineExceeded() }
            state.phase = .open
            state.release = release
        }
    }

    /// Called right before `COMMIT`; throws ``DeadlineExceeded`` when the deadline came first,
    /// so the transaction rolls back instead.
    func commit() throws {
        try state.withLock { state in
            guard state.phase != .abandoned else { throw DeadlineExceeded() }
            state.phase = .committing
        }
    }

    /// `true` once `COMMIT` was sent (or is about to be).
    var isCommitting: Bool { state.withLock { $0.phase == .committing } }

    /// Called by the batcher past its deadline: `true` when `COMMIT` has not been sent and now
    /// never will be; `false` while a `COMMIT` awaits its answer.
    func abandon() -> Bool {
        state.withLock { state in
            if state.phase == .open { state.phase = .abandoned }
            return state.phase == .abandoned
        }
    }

    /// Closes the transaction's connection, if it has one, without waiting.
    func release() {
        state.withLock { $0.release }?()
    }
}
