import CCrashCapture
import CrashWire
import Foundation

/// The SDK's entry point: start it once, early, and every guard catch, custom report,
/// uncaught error in ``run(_:)-(()->T)`` and fatal signal reaches the crash server.
///
/// ```swift
/// try CrashGuard.start(.init(
///     serverURL: URL(string: "https://crash.example.com")!,
///     ingestKey: "ik_...",
///     appID: "com.example.app", appVersion: "1.4.0", appBuild: "412"))
/// CrashGuard.record("cache rebuilt from scratch", context: ["entries": "0"])
/// await CrashGuard.flush(timeout: .seconds(2))   // before a command-line tool exits
/// ```
///
/// Every report is written to an on-disk queue before anything else, then uploaded in
/// batches; see `docs/sdk.md` for the delivery rules.
public enum CrashGuard {
    private static let current = LockedBox<Reporter?>(nil)

    /// Starts (or restarts with a new configuration) the reporter: turns a crash recorded
    /// by the previous run into a report, installs the crash handlers, connects the guards
    /// and starts uploading.
    public static func start(_ configuration: Configuration) throws {
        _ = try start(configuration, clock: SystemReporterClock(), backoff: Backoff())
    }

    /// Serializes ``start(_:)`` and ``stop()``: two racing starts leave one reporter, one
    /// queue and one set of handlers.
    private static let lifecycle = NSLock()

    /// ``start(_:)`` with an injected clock, backoff and sampling source (tests).
    static func start(
        _ configuration: Configuration,
        clock: any ReporterClock,
        backoff: Backoff,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) throws -> Reporter {
        lifecycle.lock()
        defer { lifecycle.unlock() }
        let directory = configuration.directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var device = configuration.device
        if device.id == nil { device.id = installID(in: directory) }
        // Opens (or shares, for the same directory) the queue before the old reporter
        // lets go of it, so a restart never leaves a moment without one.
        let reporter = try Reporter(
            configuration: configuration, device: device, clock: clock, backoff: backoff, random: random)

        var previousRunCrashed = false  // ends the previous run's session `crashed`
        if configuration.captureCrashes {
            // The previous run's record is moved aside and the handlers installed at once;
            // the record becomes a report on a background thread (see CrashCapture.processPrevious).
            let previous = CrashCapture.takePrevious(directory: directory, log: configuration.log)
            previousRunCrashed = previous.crashed
            do {
                try CrashCapture.install(directory: directory, app: configuration.app, device: device)
            } catch {
                configuration.log("crash capture is off: \(error)")
            }
            CrashCapture.processPrevious(
                previous.pending, app: configuration.app, device: device, now: { clock.now },
                submit: { reporter.submit($0, applyingScope: false) })
        } else {
            CrashCapture.uninstall()
        }
        GuardRecorder.install(sink: reporter, enabled: configuration.enabledGuards)
        let queue = reporter.queue
        let beforeTrap: (@Sendable () -> Void)? = configuration.debugTraps ? { @Sendable in _ = queue?.sync() } : nil
        GuardRecorder.debugTrap.withLock { $0 = beforeTrap }
        SessionLifecycle.start(reporter: reporter, clock: clock, previousRunCrashed: previousRunCrashed)
        let previous = current.withLock { state -> Reporter? in
            defer { state = reporter }
            return state
        }
        previous?.shutdown()
        reporter.startUploading()
        return reporter
    }

    /// Disconnects the guards, removes the crash handlers, ends the session (`exited`) and
    /// stops uploading; queued reports stay on disk for the next start. Idempotent.
    public static func stop() async {
        let reporter: Reporter? = lifecycle.withLock { () -> Reporter? in
            let reporter = current.withLock { state -> Reporter? in
                defer { state = nil }
                return state
            }
            GuardRecorder.uninstall()
            GuardRecorder.debugTrap.withLock { $0 = nil }
            CrashCapture.uninstall()
            SessionLifecycle.end()  // an explicit stop ends the session cleanly
            reporter?.shutdown()
            return reporter
        }
        await reporter?.stop()
    }

    /// Whether ``start(_:)`` ran.
    public static var isStarted: Bool { current.withLock { $0 != nil } }

    /// Uploads everything queued now, waiting at most `timeout` (uploads go on in the
    /// background after it). Returns `true` when the queue is empty. Call it before a
    /// process exits on purpose; what is left is sent on the next start.
    @discardableResult
    public static func flush(timeout: Duration = .seconds(5)) async -> Bool {
        guard let reporter = current.withLock({ $0 }) else { return true }
        await CrashCapture.waitForPrevious(timeout: timeout)
        return await reporter.flush(timeout: timeout)
    }

    /// ``flush(timeout:)`` for synchronous code (a `main` about to return): blocks the
    /// calling thread. Do not call it from an `async` context or the main actor's executor
    /// while it must run the uploads.
    @discardableResult
    public static func flushAndWait(timeout: Duration = .seconds(5)) -> Bool {
        waitBlocking { await flush(timeout: timeout) }
    }

    /// Records a report from app code (kind `custom` unless told otherwise), with the call
    /// site in `context` and the current stack. Returns `false` when it was not queued
    /// (not started, sampled out, dropped by the reporter block).
    @discardableResult
    public static func record(
        _ reason: String,
        kind: ReportKind = .custom,
        fatal: Bool = false,
        fingerprint: [String]? = nil,
        context: [String: String] = [:],
        fileID: String = #fileID,
        line: Int = #line,
        function: String = #function
    ) -> Bool {
        guard let reporter = current.withLock({ $0 }) else { return false }
        var context = context
        context["file"] = context["file"] ?? fileID
        context["line"] = context["line"] ?? String(line)
        context["function"] = context["function"] ?? function
        let stack = GuardStack.frames(into: &context) { Array(Thread.callStackSymbols.dropFirst()) }
        var report = reporter.report(
            for: GuardEvent(
                kind: kind, reason: reason, stack: stack, context: context, fatal: fatal, timestamp: reporter.clock.now))
        report.fingerprint = fingerprint
        return reporter.submit(report)
    }

    /// Runs `body`; an error it throws is recorded as kind `exception` (`fatal: true`: it
    /// reached the top of the program) and thrown on.
    ///
    /// ```swift
    /// @main struct Tool { static func main() throws { try CrashGuard.run { try work() } } }
    /// ```
    public static func run<T>(_ body: () throws -> T) rethrows -> T {
        do {
            return try body()
        } catch {
            recordUncaught(error)
            throw error
        }
    }

    /// The `async` form of ``run(_:)-(()->T)``.
    public static func run<T>(_ body: () async throws -> T) async rethrows -> T {
        do {
            return try await body()
        } catch {
            recordUncaught(error)
            throw error
        }
    }

    /// Gives the calling thread an alternate signal stack, so a stack overflow on it is
    /// recorded. ``start(_:)`` does this for its own thread; call it first thing on
    /// long-lived threads of your own.
    public static func prepareCurrentThread() { CrashCapture.prepareCurrentThread() }

    /// ``prepareCurrentThread()``, and names the thread for the OS (at most 15 bytes on
    /// Linux), the name a crash record shows for it.
    public static func prepareCurrentThread(name: String) {
        _ = ccrash_set_thread_name(name)
        CrashCapture.prepareCurrentThread()
    }

    // MARK: - Internals

    @inline(never)
    static func recordUncaught(_ error: any Error, fileID: String = #fileID, line: Int = #line) {
        guard let reporter = current.withLock({ $0 }) else { return }
        var context = ["error.type": String(reflecting: type(of: error))]
        let nsError = error as NSError
        context["error.domain"] = nsError.domain
        context["error.code"] = String(nsError.code)
        let stack = GuardStack.frames(into: &context, skipping: 1) { Array(Thread.callStackSymbols.dropFirst(2)) }
        let report = reporter.report(
            for: GuardEvent(
                kind: .exception,
                reason: "Error raised at top level: \(String(reflecting: error))",
                stack: stack,
                context: context,
                fatal: true,
                timestamp: reporter.clock.now))
        reporter.submit(report)
    }

    /// The install id kept in `directory/install-id`, created on first use.
    static func installID(in directory: URL) -> String {
        let url = directory.appendingPathComponent("install-id")
        if let text = try? String(contentsOf: url, encoding: .utf8),
            let id = UUID(uuidString: text.trimmingCharacters(in: .whitespacesAndNewlines))
        {
            return id.uuidString.lowercased()
        }
        let id = UUID().uuidString.lowercased()
        try? writeFileAtomically(Data((id + "\n").utf8), to: url)
        return id
    }
}
