import Foundation

/// One session per app run (release-health.md, "Dashboard and SDK"), as a small state
/// machine over an injected clock and ``SessionStorage``; it hands each update to a
/// `deliver` closure (which queues it) before it changes the stored state, so a crash between
/// the two leaves an update sent twice (a duplicate on the server), never one lost.
///
/// - ``begin(previousRunCrashed:deliver:)`` (at `CrashGuard.start`): the previous run's session, if
///   its end was never recorded, ends `crashed` when that run left a crash record, else
///   `abnormal` (killed, power loss); then a new session starts (`init`, `ok`) and its state
///   is stored, so the next launch can end it.
/// - ``recordError()``: counts a guard's catch; the first one also gives an `ok` update
///   carrying `errors: 1` and stores the count.
/// - ``end(deliver:)`` (a clean exit, `CrashGuard.stop`): `exited` with the error count (the
///   server counts an exited session with errors as errored), and the stored state is removed.
///
/// `seq` counts the session's updates from 0, so a resent update repeats its `seq` and the
/// server answers it as a duplicate.
final class SessionTracker: @unchecked Sendable {
    let release: String
    let environment: String?
    let did: String?
    private let clock: any ReporterClock
    private let storage: any SessionStorage
    private let lock = NSLock()
    private var state: SessionState?

    init(release: String, environment: String?, did: String?, clock: any ReporterClock, storage: any SessionStorage) {
        self.release = release
        self.environment = environment
        self.did = did
        self.clock = clock
        self.storage = storage
    }

    /// The running session's id, `nil` before ``begin(previousRunCrashed:deliver:)`` or after ``end(deliver:)``.
    var sid: UUID? { lock.withLock { state?.sid } }

    /// Ends the previous run's unfinished session (crashed or abnormal) and starts this
    /// run's: `deliver` gets the previous session's final update first, then the new one's
    /// `init` update.
    func begin(previousRunCrashed: Bool, deliver: (SessionUpdate) -> Void) {
        lock.withLock {
            if let previous = storage.load() {
                deliver(update(previous, status: previousRunCrashed ? .crashed : .abnormal))
            }
            let current = SessionState(
                sid: UUID(), did: did, started: clock.now, release: release, environment: environment, seq: 0, errors: 0)
            storage.save(current)
            state = current
            var first = update(current, status: .ok)
            first.seq = 0
            first.isInit = true
            deliver(first)
        }
    }

    /// Counts one error; returns an `ok` update for the first one of the session.
    func recordError() -> SessionUpdate? {
        lock.withLock {
            guard var current = state else { return nil }
            current.errors += 1
            guard current.errors == 1 else {
                state = current
                return nil
            }
            let next = update(current, status: .ok)
            current.seq = next.seq
            state = current
            storage.save(current)
            return next
        }
    }

    /// Ends this run's session as `exited` (errors carried along): `deliver` gets the final
    /// update, then the stored state is removed. Nothing when no session runs.
    func end(deliver: (SessionUpdate) -> Void) {
        lock.withLock {
            guard let current = state else { return }
            state = nil
            var final = update(current, status: .exited)
            final.duration = max(clock.now.timeIntervalSince(current.started), 0)
            deliver(final)
            storage.remove()
        }
    }

    /// The next update of `session` with `status`.
    private func update(_ session: SessionState, status: SessionUpdate.Status) -> SessionUpdate {
        SessionUpdate(
            sid: session.sid, did: session.did, seq: session.seq + 1, isInit: false, started: session.started,
            timestamp: clock.now, duration: nil, status: status, errors: session.errors,
            attrs: .init(release: session.release, environment: session.environment))
    }
}
