import CrashWire
import Foundation

/// The one place every guard records to: which guards are on, where events go, and how
/// often one call site may report.
///
/// The reporter installs its sink once at start-up; nothing is recorded before that:
///
/// ```swift
/// GuardRecorder.install(sink: reporter, enabled: [.container, .null, .arithmetic])
/// // ... later, e.g. in tests or on shutdown
/// GuardRecorder.uninstall()
/// ```
///
/// A guarded operation always does the safe thing (its documented return value); the
/// switches only decide whether the catch is *recorded*. A guard whose kind is off, or
/// any guard while no sink is installed, costs one locked load and a return: the reason
/// string, the context and the stack are never built.
///
/// Each recorded ``GuardEvent`` has `fatal: false`, the guard's reason, the stack at the
/// catch (return addresses with their images, see ``GuardStack``; at most 128 frames) and a
/// context with the call site
/// (`file`, `line`, `function`), what the guard did instead (`action`), and the guard's own
/// details. Identical reports (same kind and call site) are rate-limited per site, see
/// ``RateLimit``; the number suppressed travels in the next report from that site as
/// `context["suppressed"]`.
///
/// Thread-safe: guards may fire on any thread; the sink is called synchronously on the
/// thread where the guard fired, outside the recorder's lock.
public enum GuardRecorder {
    /// The twelve kinds a guard reports (every kind but `signal`, `exception` and `custom`).
    public static let guardKinds: Set<ReportKind> = [
        .unrecognizedSelector, .kvo, .container, .notification, .null, .timer,
        .wildPointer, .mainThread, .kvc, .string, .cast, .arithmetic,
    ]

    /// How many identical reports one call site may send.
    ///
    /// Within `interval` seconds from a site's first report, at most `maxEvents` reports
    /// with the same kind and call site (`#fileID:#line`) are recorded; the rest are
    /// counted, and the count is put in the next recorded report from that site as
    /// `context["suppressed"]`. A count still pending when the site never fires again is
    /// lost (it is only a flood counter).
    public struct RateLimit: Sendable, Hashable {
        /// Reports allowed per site and interval; `Int.max` disables limiting.
        public var maxEvents: Int
        /// Length of a site's window, in seconds.
        public var interval: TimeInterval

        /// Creates a limit of `maxEvents` per `interval` seconds and call site.
        public init(maxEvents: Int, interval: TimeInterval) {
            self.maxEvents = max(1, maxEvents)
            self.interval = max(0, interval)
        }

        /// 5 reports per call site per minute.
        public static let `default` = RateLimit(maxEvents: 5, interval: 60)
        /// No limit: every catch is recorded.
        public static let unlimited = RateLimit(maxEvents: .max, interval: 0)
    }

    /// Installs `sink` as the process-wide destination and switches on the kinds in
    /// `enabled` (default: all, including `custom` for ``record(_:reason:context:fileID:line:function:)``
    /// from app code). Replaces any earlier installation (and its rate-limit state).
    ///
    /// Called by `CrashGuard.start(_:)`; call it yourself only when you use the guards
    /// without the reporter.
    public static func install(
        sink: some GuardEventSink,
        enabled: Set<ReportKind> = Set(ReportKind.allCases),
        rateLimit: RateLimit = .default
    ) {
        let recording = Recording(sink: sink, enabled: enabled, rateLimit: rateLimit, now: { Date() }, lock: globalLock)
        globalLock.withLock { globalRecording = recording }
    }

    /// Removes the installed sink; from now on nothing is recorded (guards keep doing the
    /// safe thing).
    public static func uninstall() {
        globalLock.withLock { globalRecording = nil }
    }

    /// Whether a sink is installed process-wide.
    public static var isInstalled: Bool { globalLock.withLock { globalRecording != nil } }

    /// The kinds currently recorded (in the current ``withSink(_:enabled:rateLimit:now:operation:)``
    /// scope, else process-wide); empty when nothing is installed.
    public static var enabledKinds: Set<ReportKind> {
        guard let recording = current() else { return [] }
        return recording.enabledKinds
    }

    /// Switches guards on or off at run time without reinstalling the sink.
    public static func setEnabled(_ kinds: Set<ReportKind>) {
        current()?.setEnabled(kinds)
    }

    /// Whether a catch of `kind` would be recorded right now: one locked load.
    public static func isEnabled(_ kind: ReportKind) -> Bool {
        current()?.isEnabled(kind) ?? false
    }

    /// Runs `operation` with `sink` as the destination for every guard that fires in this
    /// task and its child tasks, and for guard objects (timers, observation registries)
    /// created inside it, instead of the process-wide sink. Made for tests, which run in
    /// parallel; `now` replaces the clock of the rate limiter.
    public static func withSink<R>(
        _ sink: some GuardEventSink,
        enabled: Set<ReportKind> = Set(ReportKind.allCases),
        rateLimit: RateLimit = .unlimited,
        now: @escaping @Sendable () -> Date = { Date() },
        operation: () throws -> R
    ) rethrows -> R {
        let recording = Recording(sink: sink, enabled: enabled, rateLimit: rateLimit, now: now)
        return try $scoped.withValue(recording, operation: operation)
    }

    /// The `async` form of ``withSink(_:enabled:rateLimit:now:operation:)``.
    public static func withSink<R>(
        _ sink: some GuardEventSink,
        enabled: Set<ReportKind> = Set(ReportKind.allCases),
        rateLimit: RateLimit = .unlimited,
        now: @escaping @Sendable () -> Date = { Date() },
        operation: () async throws -> R
    ) async rethrows -> R {
        let recording = Recording(sink: sink, enabled: enabled, rateLimit: rateLimit, now: now)
        return try await $scoped.withValue(recording, operation: operation)
    }

    /// Records a catch from app code or a guard of your own: `fatal: false`, the call site
    /// and stack stamped in. `reason` and `context` are only evaluated when `kind` is on
    /// and the call site is not rate-limited.
    public static func record(
        _ kind: ReportKind,
        reason: @autoclosure () -> String,
        context: @autoclosure () -> [String: String] = [:],
        fileID: String = #fileID,
        line: Int = #line,
        function: String = #function
    ) {
        record(
            kind, site: CallSite(fileID: fileID, line: line, function: function), in: nil,
            reason: reason(), context: context())
    }

    // MARK: - Internals shared with the guards

    /// Where the recording goes for a scope: the sink, the switches, the rate limiter.
    final class Recording: @unchecked Sendable {
        let sink: any GuardEventSink
        let rateLimit: RateLimit
        let now: @Sendable () -> Date
        /// Guards the switches and the rate limiter. The process-wide recording shares
        /// `globalLock`, so that a guard that is off costs that one lock.
        private let lock: NSLock
        private var enabledMask: UInt32
        private var sites: [SiteKey: SiteState] = [:]
        private static let maxSites = 4096

        init(
            sink: some GuardEventSink, enabled: Set<ReportKind>, rateLimit: RateLimit,
            now: @escaping @Sendable () -> Date, lock: NSLock = NSLock()
        ) {
            self.lock = lock
            self.sink = sink
            self.rateLimit = rateLimit
            self.now = now
            self.enabledMask = Self.mask(enabled)
        }

        static func mask(_ kinds: Set<ReportKind>) -> UInt32 {
            kinds.reduce(0) { $0 | bit($1) }
        }

        private static let bits: [ReportKind: UInt32] = Dictionary(
            uniqueKeysWithValues: ReportKind.allCases.enumerated().map { ($1, UInt32(1) << UInt32($0)) }
        )

        static func bit(_ kind: ReportKind) -> UInt32 { bits[kind] ?? 0 }

        var enabledKinds: Set<ReportKind> {
            let mask = lock.withLock { enabledMask }
            return Set(ReportKind.allCases.filter { mask & Self.bit($0) != 0 })
        }

        func setEnabled(_ kinds: Set<ReportKind>) {
            let mask = Self.mask(kinds)
            lock.withLock { enabledMask = mask }
        }

        func isEnabled(_ kind: ReportKind) -> Bool {
            let bit = Self.bit(kind)
            return lock.withLock { enabledMask & bit != 0 }
        }

        /// `isEnabled` for a caller that already holds `lock`.
        func isEnabledLocked(_ kind: ReportKind) -> Bool {
            enabledMask & Self.bit(kind) != 0
        }

        /// `nil` when the site is over its limit (and counts it); otherwise the number of
        /// reports suppressed since the last recorded one.
        func admit(_ key: SiteKey) -> Int? {
            if rateLimit.maxEvents == .max { return 0 }
            let t = now()
            return lock.withLock { () -> Int? in
                if var state = sites[key] {
                    if t.timeIntervalSince(state.windowStart) >= rateLimit.interval || t < state.windowStart {
                        state.windowStart = t
                        state.recorded = 0
                    }
                    if state.recorded >= rateLimit.maxEvents {
                        state.suppressed += 1
                        sites[key] = state
                        return nil
                    }
                    let suppressed = state.suppressed
                    state.recorded += 1
                    state.suppressed = 0
                    sites[key] = state
                    return suppressed
                }
                if sites.count >= Self.maxSites {
                    // Forget sites whose window is over; if all are live, start afresh.
                    sites = sites.filter { t.timeIntervalSince($0.value.windowStart) < rateLimit.interval }
                    if sites.count >= Self.maxSites { sites.removeAll(keepingCapacity: true) }
                }
                sites[key] = SiteState(windowStart: t, recorded: 1, suppressed: 0)
                return 0
            }
        }
    }

    struct SiteKey: Hashable {
        var kind: ReportKind
        var fileID: String
        var line: Int
    }

    struct SiteState {
        var windowStart: Date
        var recorded: Int
        var suppressed: Int
    }

    @TaskLocal static var scoped: Recording?

    private static let globalLock = NSLock()
    nonisolated(unsafe) private static var globalRecording: Recording?

    /// The recording for the current task: its scope, else the process-wide one.
    static func current() -> Recording? {
        if let scoped { return scoped }
        return globalLock.withLock { globalRecording }
    }

    /// The scope to remember in a guard object that fires later on another thread:
    /// `nil` (meaning "whatever is installed then") outside a ``withSink`` scope.
    static func captureScope() -> Recording? { scoped }

    /// The guards' entry point. `captured` is a scope remembered by a guard object, used
    /// when the firing task has no scope of its own. The stack is `addresses` (return
    /// addresses the guard captured) or the caller's, with their images (``GuardStack``);
    /// `stack` (or `Thread.callStackSymbols`) only when no address could be captured.
    @inline(never)
    static func record(
        _ kind: ReportKind,
        site: CallSite,
        in captured: Recording?,
        reason: @autoclosure () -> String,
        context: @autoclosure () -> [String: String] = [:],
        stack: @autoclosure () -> [String]? = nil,
        addresses: [UInt64] = []
    ) {
        // The firing task's scope first, then the scope remembered by the guard object
        // (deferred callbacks on other threads), then the process-wide installation.
        let recording: Recording
        if let local = scoped ?? captured {
            guard local.isEnabled(kind) else { return }
            recording = local
        } else {
            // One lock: the installed recording and its switches together.
            let installed = globalLock.withLock { globalRecording.flatMap { $0.isEnabledLocked(kind) ? $0 : nil } }
            guard let installed else { return }
            recording = installed
        }
        guard let suppressed = recording.admit(SiteKey(kind: kind, fileID: site.fileID, line: site.line)) else {
            return
        }
        var ctx = context()
        ctx["file"] = site.fileID
        ctx["line"] = String(site.line)
        ctx["function"] = site.function
        if suppressed > 0 { ctx["suppressed"] = String(suppressed) }
        let frames: [String]
        if addresses.isEmpty {
            frames = GuardStack.frames(into: &ctx) { stack() ?? Thread.callStackSymbols }
        } else {
            // The return addresses the guard captured at its catch (the Objective-C guards').
            let captured = GuardStack.format(addresses, skipped: 1)
            ctx.merge(captured.context) { mine, _ in mine }
            frames = captured.frames
        }
        let event = GuardEvent(
            kind: kind,
            reason: Limits.reason(reason()),
            stack: frames.prefix(ReportLimits.maxFrames).map { Limits.truncate($0, bytes: ReportLimits.frameBytes) },
            context: Limits.context(ctx),
            fatal: false,
            timestamp: recording.now()
        )
        recording.sink.record(event)
        // Debug mode traps only for the process-wide installation, never in a test's scope.
        if scoped == nil && captured == nil, let beforeTrap = debugTrap.withLock({ $0 }) {
            beforeTrap()
            fatalError("CrashGuard debug trap after recording \(kind.rawValue): \(event.reason)")
        }
    }

    /// Debug mode: set, a guard that recorded a catch stops the process with `fatalError`
    /// (after `beforeTrap` has put the report on disk), so the bug is seen in development
    /// instead of being hidden. See ``CrashGuard/Configuration/debugTraps``.
    static let debugTrap = LockedBox<(@Sendable () -> Void)?>(nil)
}

/// A call site, as `#fileID`, `#line`, `#function` give it.
struct CallSite: Sendable, Hashable {
    var fileID: String
    var line: Int
    var function: String
}

/// A value behind an `NSLock`.
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Cuts events to the contract's limits so the reporter never sends a report the server
/// would reject.
enum Limits {
    static func reason(_ text: String) -> String {
        let cut = truncate(text, bytes: ReportLimits.reasonBytes.upperBound)
        return cut.isEmpty ? "guard caught an error" : cut
    }

    static func stack(_ frames: [String]) -> [String] {
        // Drop the recorder's own frames (and Thread.callStackSymbols itself) where they
        // are symbolicated (Apple platforms; `GuardRecorder` mangles as `10CrashGuard0B8RecorderO`).
        // On Linux the executable's frames are `binary(+0x…)` and are kept as they are,
        // for symbolication off the device.
        var rest = frames[...]
        while let first = rest.first,
            first.contains("callStackSymbols") || first.contains("0B8RecorderO") || first.contains("GuardRecorder")
        {
            rest = rest.dropFirst()
        }
        return rest.prefix(ReportLimits.maxFrames).map { truncate($0, bytes: ReportLimits.frameBytes) }
    }

    static func context(_ ctx: [String: String]) -> [String: String] {
        var out: [String: String] = [:]
        // Call-site keys first so they survive the entry cap, then what symbolication needs.
        let first = ["file", "line", "function", "action", "suppressed", "crash.machineryFrames"]
        let keys =
            first.filter { ctx[$0] != nil } + ctx.keys.filter { $0.hasPrefix("image.") }.sorted()
            + ctx.keys.filter { !first.contains($0) && !$0.hasPrefix("image.") }.sorted()
        for key in keys.prefix(ReportLimits.maxContextEntries) {
            out[truncate(key, bytes: ReportLimits.contextKeyBytes)] = truncate(ctx[key]!, bytes: ReportLimits.contextValueBytes)
        }
        return out
    }

    /// The longest prefix of `text` within `bytes` UTF-8 bytes, cut on a character
    /// boundary, with NUL characters removed.
    static func truncate(_ text: String, bytes: Int) -> String {
        var text = text
        if text.utf8.contains(0) { text = text.replacingOccurrences(of: "\0", with: "") }
        if text.utf8.count <= bytes { return text }
        var count = 0
        var end = text.startIndex
        for index in text.indices {
            let next = text.index(after: index)
            let size = text.utf8.distance(from: index, to: next)
            if count + size > bytes { break }
            count += size
            end = next
        }
        return String(text[..<end])
    }
}
