import CrashGuardObjC
import CrashWire
import Foundation

/// The Objective-C runtime guards (`Sources/CrashGuardObjC`): the seeds' own mechanisms,
/// which protect Objective-C code nobody rewrote (swizzled class clusters, a forwarding
/// stub for unrecognized selectors, a KVO proxy, observers removed at dealloc, a weak
/// timer target, zombies, NSNull forwarding).
///
/// On Apple platforms, install them once, early (after ``CrashGuard/start(_:)``, so that
/// what they catch reaches the server like any other guard report):
///
/// ```swift
/// try CrashGuard.start(configuration)
/// ObjCRuntimeGuards.install([.container, .string, .unrecognizedSelector, .null, .kvo])
/// ObjCRuntimeGuards.protectFromZombies(["MYProfileViewController"])
/// ```
///
/// Each catch is recorded through ``GuardRecorder`` with the contract's kind, the
/// runtime's own reason (`-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]`),
/// the Objective-C stack, `context["action"]` (what the guard did instead), the guarded
/// method as `context["function"]`, and the app's frame that made the call
/// (`MyApp+0x4a2f`) as `context["file"]`: that frame is the rate-limit site, so two places
/// in the app reading past an array's end are limited separately.
///
/// On Linux the Objective-C target compiles to nothing under SwiftPM (there is no
/// Objective-C runtime to build against without `unsafeFlags`); `scripts/objc-test`
/// builds the same sources against GNUstep, and code that loads that build passes
/// ``reportCallback`` to its `crashguard_objc_install`.
public enum ObjCRuntimeGuards {
    /// The guard families; each is opt-in.
    public struct Families: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        /// NSArray / NSDictionary / NSSet / NSOrderedSet / NSCache / NSData (kind `container`).
        public static let container = Families(rawValue: 1 << 0)
        /// NSString / NSMutableString / NSAttributedString (kind `string`).
        public static let string = Families(rawValue: 1 << 1)
        /// Unrecognized selectors sent to the app's classes answered by a stub (kind
        /// `unrecognizedSelector`); see ``limitSelectorGuard(classPrefixes:images:)``.
        public static let unrecognizedSelector = Families(rawValue: 1 << 2)
        /// KVO bookkeeping through a proxy (kind `kvo`).
        public static let kvo = Families(rawValue: 1 << 3)
        /// Notification observers removed at dealloc (kind `notification`).
        public static let notification = Families(rawValue: 1 << 4)
        /// Repeating timers target a weak proxy (kind `timer`).
        public static let timer = Families(rawValue: 1 << 5)
        /// Freed instances of the listed classes become zombies (kind `wildPointer`).
        public static let zombie = Families(rawValue: 1 << 6)
        /// NSNull forwards to "" / 0 / [] / {} (kind `null`).
        public static let null = Families(rawValue: 1 << 7)
        /// Undefined keys, nil keys and nil for a scalar answer nil / are ignored (kind `kvc`).
        public static let kvc = Families(rawValue: 1 << 8)
        /// Every family.
        public static let all = Families(rawValue: 0x1FF)
    }

    /// The C callback the Objective-C guards report through: it forwards each report into
    /// ``GuardRecorder`` (switches, rate limit, the installed sink or the task's
    /// `GuardRecorder.withSink` scope). Called on the thread where the guard fired.
    public static let reportCallback: crashguard_objc_report_fn = { report in
        guard let report else { return }
        ObjCRuntimeGuards.record(report.pointee)
    }

    /// Turns one C report into a guard event.
    static func record(_ report: crashguard_objc_report) {
        let kindName = report.kind.map { String(cString: $0) } ?? ""
        let kind = ReportKind(rawValue: kindName) ?? .custom
        let site = report.site.map { String(cString: $0) } ?? "objc"
        let function = report.function.map { String(cString: $0) } ?? site
        GuardRecorder.record(
            kind,
            site: CallSite(fileID: site, line: 0, function: function),
            in: nil,
            reason: report.reason.map { String(cString: $0) } ?? "",
            context: ["action": report.action.map { String(cString: $0) } ?? "", "runtime": "objc"],
            stack: frames(report),
            addresses: report.addresses.map { raw in (0..<report.address_count).map { UInt64(raw[$0]) } } ?? []
        )
    }

    private static func frames(_ report: crashguard_objc_report) -> [String] {
        guard let stack = report.stack else { return [] }
        return (0..<report.stack_count).compactMap { stack[$0].map { String(cString: $0) } }
    }

    #if canImport(ObjectiveC)
    /// Installs `families` (swizzling happens at a family's first install) with
    /// ``reportCallback``; returns the families now installed. `raiseAfterRecording` is the
    /// debug mode: after recording, the guard raises the exception the runtime would have
    /// raised, so the bug shows at once during development.
    @discardableResult
    public static func install(_ families: Families, raiseAfterRecording: Bool = false) -> Families {
        crashguard_objc_set_raise_after_recording(raiseAfterRecording ? 1 : 0)
        return Families(rawValue: crashguard_objc_install(families.rawValue, reportCallback))
    }

    /// Switches installed families on or off at run time (a family that is off calls the
    /// original implementation).
    public static func setEnabled(_ families: Families) {
        crashguard_objc_set_enabled(families.rawValue)
    }

    /// Limits the unrecognized-selector guard to the app's classes: those whose name starts
    /// with one of `classPrefixes`, or that were loaded from one of `images` (paths or file
    /// names; empty: the main executable), and their subclasses. The system's classes keep
    /// raising. Without a call, the main executable's classes are guarded.
    ///
    /// ```swift
    /// ObjCRuntimeGuards.limitSelectorGuard(classPrefixes: ["MY"], images: ["MyKit"])
    /// ```
    public static func limitSelectorGuard(classPrefixes: [String] = [], images: [String] = []) {
        withCStrings(classPrefixes) { prefixes in
            withCStrings(images) { names in
                crashguard_objc_selector_scope(prefixes.baseAddress, prefixes.count, names.baseAddress, names.count)
            }
        }
    }

    private static func withCStrings<R>(
        _ strings: [String], _ body: (UnsafeBufferPointer<UnsafePointer<CChar>?>) -> R
    ) -> R {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        return copies.map { UnsafePointer($0) }.withUnsafeBufferPointer(body)
    }

    /// The zombie guard's white list: instances of these classes become zombies (also those
    /// of their subclasses) when freed.
    /// `quarantineBytes` bounds the memory they hold (default 2 MiB).
    public static func protectFromZombies(_ classNames: [String], quarantineBytes: Int = 2 << 20) {
        for name in classNames { crashguard_objc_zombie_protect_class(name) }
        crashguard_objc_zombie_set_quarantine_bytes(max(0, quarantineBytes))
    }
    #endif
}
