import CrashWire
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's session: started by `CrashGuard.start`, ended by `CrashGuard.stop` or at a
/// clean exit (`atexit`), its updates queued in the reporter's kept store (see
/// ``SessionTracker`` for the states).
enum SessionLifecycle {
    private struct Live {
        var tracker: SessionTracker
        var reporter: Reporter
        /// Directory, release, environment and install id: a restart with the same ones keeps
        /// the session (a reconfiguration is not a new run).
        var key: String
    }

    private static let live = LockedBox<Live?>(nil)
    private static let exitHook = LockedBox(false)

    /// Called by `start` once the new reporter exists and before the previous one lets go of
    /// the queue. `previousRunCrashed`: the previous run left a crash record.
    static func start(reporter: Reporter, clock: any ReporterClock, previousRunCrashed: Bool) {
        let configuration = reporter.configuration
        guard configuration.trackSessions, reporter.queue != nil else {
            end()
            return
        }
        let release = "\(configuration.app.id)@\(configuration.app.version)"
        let environment = configuration.validEnvironment
        let key = [configuration.directory.standardizedFileURL.path, release, environment ?? "", reporter.device.id ?? ""]
            .joined(separator: "\n")
        live.withLock { live in
            if var same = live, same.key == key {
                same.reporter = reporter
                live = same
                return
            }
            if let old = live { old.tracker.end { old.reporter.submitSession($0, durable: true) } }
            let tracker = SessionTracker(
                release: release, environment: environment, did: reporter.device.id, clock: clock,
                storage: FileSessionStorage(directory: configuration.directory))
            // The previous run's final update is durable (it is the only record of how that
            // run ended); the new session's first update needs no fsync (its end counts it
            // as started anyway).
            tracker.begin(previousRunCrashed: previousRunCrashed) { reporter.submitSession($0, durable: $0.status != .ok) }
            live = Live(tracker: tracker, reporter: reporter, key: key)
        }
        installExitHook()
    }

    /// Ends the session as `exited` (a clean exit or `CrashGuard.stop`), its final update on
    /// disk before this returns. Idempotent.
    static func end() {
        live.withLock { live in
            guard let current = live else { return }
            live = nil
            current.tracker.end { current.reporter.submitSession($0, durable: true) }
        }
    }

    /// A guard recorded an error through `reporter`: counted in the session (`errors`) when
    /// that reporter is the session's (a reporter made by hand, in tests, has none).
    static func recordError(from reporter: Reporter) {
        live.withLock { live in
            guard let current = live, current.reporter === reporter, let update = current.tracker.recordError() else { return }
            current.reporter.submitSession(update, durable: false)
        }
    }

    /// The running session's id (tests).
    static var sid: UUID? { live.withLock { $0?.tracker.sid } }

    /// At a clean exit (`exit`, or `main` returning): the session ends `exited` and what
    /// the queue wrote without fsync is synced. A crash or SIGKILL never runs it: the next
    /// start tells those apart by the crash record.
    private static func installExitHook() {
        let first = exitHook.withLock { installed -> Bool in
            defer { installed = true }
            return !installed
        }
        guard first else { return }
        atexit {
            let queue = SessionLifecycle.live.withLock { $0?.reporter.queue }
            SessionLifecycle.end()
            queue?.syncToDisk()
        }
    }
}
