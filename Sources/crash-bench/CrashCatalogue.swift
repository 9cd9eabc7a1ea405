import CrashWire
import Foundation
import SeededRandom

/// A generated catalogue of distinct crash sites, and occurrences of each with the
/// variation real traffic has: what `crash-bench grouping` groups to count merges and splits.
///
/// A site is one bug: one place in the app's code (its innermost app frames) with one
/// reason template. Sites are built from a seed, each with its own class, method and file
/// names, and share what real apps share: the same reason text at several sites (every
/// "Index out of range"), the same exception machinery and system frames on top of their
/// stacks, the same run-loop and `main` frames below. Every occurrence varies what must not
/// split a group: object and frame addresses (`0x0` among them), indices, counts and sizes
/// (negative ones too), the depth of the stack (20 to 40 frames) and so every frame's
/// index, the callers below the crash site, the device, and the thread.
struct CrashCatalogue {
    /// One crash site.
    struct Site: Sendable {
        var id: Int
        var platform: Platform
        var kind: ReportKind
        /// The reason, with `{a}` (an address, sometimes `0x0`), `{n}` (a count), `{i}`
        /// (a signed index), `{t}` (a thread number) and `{ms}` (a duration) placeholders.
        var reason: String
        /// Machinery and system frames on top of the stack (innermost first), as symbols.
        var top: [Frame]
        /// The app frames of the crash site, innermost first (at least three).
        var app: [Frame]
    }

    enum Platform: String, CaseIterable, Sendable {
        case iOSException, iOSSignal, iOSGuard, iOSMarked, linuxSwift, python, javascript, systemOnly
    }

    /// A frame before it is printed: image and symbol (Darwin), or module and function (Sentry).
    struct Frame: Sendable {
        var image: String
        var symbol: String
    }

    struct Occurrence: Sendable {
        var site: Int
        var kind: ReportKind
        var reason: String
        var stack: [String]
        var device: String
    }

    let sites: [Site]

    init(sites count: Int, seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        sites = (0..<count).map { Self.makeSite($0, &rng) }
    }

    // MARK: - Vocabulary

    static let nouns = [
        "Feed", "Profile", "Checkout", "Cart", "Order", "Payment", "Session", "Image", "Video", "Chat", "Message", "Search",
        "Settings", "Onboarding", "Map", "Location", "Photo", "Upload", "Download", "Sync", "Cache", "Token", "Account",
        "Wallet", "Coupon", "Review", "Rating", "Playlist", "Track", "Player", "Story", "Comment", "Notification", "Badge",
        "Friend", "Invite", "Address", "Shipping", "Invoice", "Receipt", "Calendar", "Event", "Ticket", "Booking",
    ]
    static let roles = [
        "ViewController", "Cell", "Model", "Store", "Service", "Manager", "Coordinator", "Presenter", "Loader", "Parser",
        "View", "Router", "Client", "Repository", "Formatter", "Validator",
    ]
    static let verbs = [
        "load", "reload", "configure", "update", "render", "apply", "validate", "submit", "parse", "decode", "refresh",
        "prepare", "handle", "process", "merge", "select", "insert", "remove", "present", "dismiss", "bind", "compute",
    ]
    static let objects = ["Items", "Rows", "Page", "Section", "Header", "Layout", "State", "Response", "Payload", "Image", "Total"]

    /// Reasons shared by many sites (the same message from different places), by kind.
    static let sharedReasons: [(ReportKind, String)] = [
        (.signal, "Fatal error: Index out of range"),
        (.signal, "Fatal error: Unexpectedly found nil while unwrapping an Optional value"),
        (.signal, "EXC_BAD_ACCESS (SIGSEGV): KERN_INVALID_ADDRESS at {a}"),
        (.signal, "EXC_BAD_ACCESS (SIGBUS): KERN_PROTECTION_FAILURE at {a}"),
        (.signal, "SIGABRT: abort() called"),
        (.signal, "Thread {t}: EXC_BAD_ACCESS (code=1, address={a})"),
        (.container, "*** -[__NSArrayM objectAtIndex:]: index {n} beyond bounds [0 .. {n}]"),
        (.container, "*** -[__NSArrayI objectAtIndexedSubscript:]: index {n} beyond bounds [0 .. {n}]"),
        (.container, "*** -[__NSDictionaryM setObject:forKey:]: object cannot be nil (key: identifier)"),
        (.null, "-[NSNull length]: unrecognized selector sent to instance {a}"),
        (.unrecognizedSelector, "-[NSNull objectForKeyedSubscript:]: unrecognized selector sent to instance {a}"),
        (
            .kvo,
            "Cannot remove an observer <NSKeyValueObservance {a}> for the key path \"contentSize\" from <UIScrollView {a}> because it is not registered as an observer."
        ),
        (
            .mainThread,
            "Modifications to the layout engine must not be performed from a background thread after it has been accessed from the main thread."
        ),
        (.string, "*** -[__NSCFString substringToIndex:]: Index {n} out of bounds; string length {n}"),
        (.arithmetic, "Fatal error: Division by zero"),
        (.cast, "Could not cast value of type '__NSCFNumber' ({a}) to 'NSString' ({a})."),
        (.timer, "Timer fired on a deallocated target after {ms}ms"),
        (
            .exception,
            "*** Terminating app due to uncaught exception 'NSInternalInconsistencyException', reason: 'Invalid update: invalid number of rows in section {n}. The number of rows contained in an existing section after the update ({i}) must be equal to the number of rows contained in that section before the update ({n}), plus or minus the number of rows inserted or deleted from that section ({n} inserted, {n} deleted).'"
        ),
        (
            .exception,
            "*** Terminating app due to uncaught exception 'NSInternalInconsistencyException', reason: 'attempt to delete item {n} from section {n} which only contains {n} items before the update'"
        ),
        (
            .exception,
            "*** Terminating app due to uncaught exception 'NSInternalInconsistencyException', reason: 'UICollectionView received layout attributes for a cell with an index path that does not exist: <NSIndexPath: {a}> {length = {n}, path = {n} - {n}}'"
        ),
        (
            .exception,
            "*** Terminating app due to uncaught exception 'NSRangeException', reason: '*** -[__NSArrayM objectAtIndex:]: index {n} beyond bounds [0 .. {n}]'"
        ),
        (
            .exception,
            "*** Terminating app due to uncaught exception 'NSInvalidArgumentException', reason: '*** -[__NSPlaceholderDictionary initWithObjects:forKeys:count:]: attempt to insert nil object from objects[{n}]'"
        ),
    ]

    // MARK: - Sites

    static func makeSite(_ id: Int, _ rng: inout SplitMix64) -> Site {
        let platform = Platform.allCases[id % Platform.allCases.count]
        let noun = nouns[(id / 3) % nouns.count] + (id >= 3 * nouns.count ? String(id / (3 * nouns.count) + 1) : "")
        let role = roles[id % roles.count]
        let type = noun + role
        func method(_ k: Int) -> String {
            verbs[(id &* 7 &+ k &* 3) % verbs.count] + objects[(id &+ k) % objects.count]
        }
        /// "" for the innermost app frame, then "1", "2" ...: its type's or method's suffix.
        func nth(_ k: Int) -> String { k == 0 ? "" : String(k) }
        /// The site, with five app frames in `image`, `symbol(k)` naming the k-th (innermost first).
        func site(_ kind: ReportKind, _ reason: String, _ top: [Frame], image: String, symbol: (Int) -> String) -> Site {
            Site(
                id: id, platform: platform, kind: kind, reason: reason, top: top,
                app: (0..<5).map { Frame(image: image, symbol: symbol($0)) })
        }
        let ownReason = id % 3 != 0  // a third of the sites share one of the common reasons
        switch platform {
        case .iOSException:
            let shared = sharedReasons.filter { $0.0 == .exception }
            let reason =
                ownReason
                ? "*** Terminating app due to uncaught exception 'NSInternalInconsistencyException', reason: '\(type) \(method(0)) expected {n} items, got {i} (state {n})'"
                : shared[id % shared.count].1
            let assertion = id % 2 == 0
            var top = [
                Frame(image: "CoreFoundation", symbol: "__exceptionPreprocess"),
                Frame(image: "libobjc.A.dylib", symbol: "objc_exception_throw"),
            ]
            if assertion {
                top.append(Frame(image: "Foundation", symbol: "_userInfoForFileAndLine"))
                top.append(
                    Frame(
                        image: "Foundation",
                        symbol: "-[NSAssertionHandler handleFailureInMethod:object:file:lineNumber:description:]"))
            }
            top.append(Frame(image: "UIKitCore", symbol: "-[UITableView _endCellAnimationsWithContext:]"))
            top.append(Frame(image: "UIKitCore", symbol: "-[UITableView endUpdates]"))
            return site(.exception, reason, top, image: "Shop") { "-[\(type)\(nth($0)) \(method($0)):]" }
        case .iOSSignal:
            let shared = sharedReasons.filter { $0.0 == .signal }
            let reason = ownReason ? "Fatal error: \(type).\(method(0)) found {n} pending \(noun.lowercased()) updates" : shared[id % shared.count].1
            let abort = reason.contains("abort") || id % 4 == 1
            var top: [Frame] = []
            if abort {
                top = [
                    Frame(image: "libsystem_kernel.dylib", symbol: "__pthread_kill"),
                    Frame(image: "libsystem_pthread.dylib", symbol: "pthread_kill"),
                    Frame(image: "libsystem_c.dylib", symbol: "abort"),
                ]
            } else if reason.hasPrefix("Fatal error") {
                top = [
                    Frame(
                        image: "libswiftCore.dylib",
                        symbol:
                            "Swift._assertionFailure(_: Swift.StaticString, _: Swift.String, file: Swift.StaticString, line: Swift.UInt, flags: Swift.UInt32) -> Swift.Never"
                    )
                ]
                if reason.contains("Index out of range") {
                    top.append(
                        Frame(
                            image: "libswiftCore.dylib",
                            symbol: "Swift._ArrayBuffer._checkInoutAndNativeTypeCheckedBounds(_: Swift.Int, wasNativeTypeChecked: Swift.Bool) -> ()"))
                }
            } else {
                top = [Frame(image: "libobjc.A.dylib", symbol: "objc_msgSend")]
            }
            return site(.signal, reason, top, image: "Shop") { "Shop.\(type)\(nth($0)).\(method($0))() -> ()" }
        case .iOSGuard, .iOSMarked:
            let guarded = sharedReasons.filter { $0.0 != .signal && $0.0 != .exception }
            let (kind, sharedReason) = guarded[id % guarded.count]
            let reason = ownReason ? sharedReason.replacingOccurrences(of: "NSNull", with: type) : sharedReason
            // The SDK's guard and recorder frames sit on top, inside the app's own image.
            let top = [
                Frame(image: "Shop", symbol: "CrashGuard.GuardRecorder.record(kind: CrashWire.ReportKind, reason: Swift.String) -> ()"),
                Frame(image: "Shop", symbol: "closure #1 in CrashGuard.ContainerGuard.install() -> ()"),
                Frame(image: "CoreFoundation", symbol: "-[__NSArrayM objectAtIndex:]"),
            ]
            return site(kind, reason, top, image: platform == .iOSMarked ? "ShopKit" : "Shop") { "-[\(type)\(nth($0)) \(method($0))]" }
        case .linuxSwift:
            let reason =
                ownReason
                ? "Fatal error: \(type).\(method(0)): unexpected balance {i} for \(noun.lowercased()) {n}"
                : "Fatal error: Index out of range"
            let top = [
                Frame(image: "libswiftCore.so", symbol: "$ss17_assertionFailure_4file4line5flagss5NeverOs12StaticStringV_SSAHSus6UInt32VtF"),
                Frame(image: "libc.so.6", symbol: "raise"),
            ]
            return site(.signal, reason, top, image: "shop-server") { "\(type)\(nth($0)).\(method($0))(_:)" }
        case .python:
            let errors = ["KeyError: 'user_id'", "IndexError: list index out of range", "AttributeError: 'NoneType' object has no attribute 'id'"]
            let reason =
                ownReason
                ? "ValueError: \(noun.lowercased()) {n} has {i} \(objects[id % objects.count].lowercased()) left, expected at least {n}"
                : errors[id % errors.count]
            let top = [
                Frame(image: "django.core.handlers.exception", symbol: "inner"),
                Frame(image: "django.core.handlers.base", symbol: "_get_response"),
            ]
            let module = "shop.\(noun.lowercased()).\(role.lowercased())s"
            return Site(
                id: id, platform: platform, kind: .exception, reason: reason, top: top,
                app: (0..<5).map { Frame(image: module + ($0 == 0 ? "" : ".part\($0)"), symbol: "\(method($0).lowercased())") })
        case .javascript:
            let errors = [
                "TypeError: Cannot read properties of undefined (reading 'id')", "TypeError: e.map is not a function",
                "RangeError: Maximum call stack size exceeded",
            ]
            let reason = ownReason ? "Error: \(type) \(method(0)) failed after {ms}ms and {n} retries" : errors[id % errors.count]
            let top = [
                Frame(image: "node_modules/react-dom/cjs/react-dom.production.min.js", symbol: "commitHookEffectListMount"),
                Frame(image: "node:internal/process/task_queues", symbol: "processTicksAndRejections"),
            ]
            return site(.exception, reason, top, image: "app:///static/js/\(noun.lowercased()).js") { "\(method($0))\(nth($0))" }
        case .systemOnly:
            // No app frame at all: a watchdog kill or a crash inside a framework's own queue.
            let reason = "Watchdog: \(type) scene-update timeout (0x8badf00d) after {ms}ms"
            let top: [Frame] = []
            return Site(
                id: id, platform: platform, kind: .signal, reason: reason, top: top,
                app: [
                    Frame(image: "libsystem_kernel.dylib", symbol: "mach_msg2_trap"),
                    Frame(image: "CoreFoundation", symbol: "__CFRunLoopServiceMachPort"),
                    Frame(image: "CoreFoundation", symbol: "__CFRunLoopRun"),
                ])
        }
    }

    // MARK: - Occurrences

    static let devices = ["iPhone14,2", "iPhone15,3", "iPhone16,1", "iPad13,4", "iPhone12,1", "Pixel 8", "x86_64"]
    static let bottomIOS: [Frame] = [
        Frame(image: "CoreFoundation", symbol: "__CFRUNLOOP_IS_CALLING_OUT_TO_A_SOURCE0_PERFORM_FUNCTION__"),
        Frame(image: "CoreFoundation", symbol: "__CFRunLoopDoSource0"),
        Frame(image: "CoreFoundation", symbol: "__CFRunLoopDoSources0"),
        Frame(image: "CoreFoundation", symbol: "__CFRunLoopRun"),
        Frame(image: "CoreFoundation", symbol: "CFRunLoopRunSpecific"),
        Frame(image: "GraphicsServices", symbol: "GSEventRunModal"),
        Frame(image: "UIKitCore", symbol: "-[UIApplication _run]"),
        Frame(image: "UIKitCore", symbol: "UIApplicationMain"),
        Frame(image: "Shop", symbol: "main"),
        Frame(image: "dyld", symbol: "start"),
    ]
    static let middleIOS: [Frame] = [
        Frame(image: "UIKitCore", symbol: "-[UIViewController _sendViewDidLoadWithAppearanceProxyObjectTaggingEnabled]"),
        Frame(image: "UIKitCore", symbol: "-[UIViewController loadViewIfRequired]"),
        Frame(image: "UIKitCore", symbol: "-[UINavigationController _updateScrollViewFromViewController:toViewController:]"),
        Frame(image: "libdispatch.dylib", symbol: "_dispatch_call_block_and_release"),
        Frame(image: "libdispatch.dylib", symbol: "_dispatch_client_callout"),
        Frame(image: "libdispatch.dylib", symbol: "_dispatch_main_queue_drain"),
        Frame(image: "UIKitCore", symbol: "-[UITableView _updateVisibleCellsNow:]"),
        Frame(image: "UIKitCore", symbol: "-[UITableView layoutSubviews]"),
        Frame(image: "QuartzCore", symbol: "CA::Layer::layout_if_needed(CA::Transaction*)"),
        Frame(image: "QuartzCore", symbol: "CA::Transaction::commit()"),
    ]

    static let middleLinux: [Frame] = [
        Frame(image: "libswift_Concurrency.so", symbol: "swift::runJobInEstablishedExecutorContext(swift::Job*)"),
        Frame(image: "libswift_Concurrency.so", symbol: "swift_job_run"),
        Frame(image: "libdispatch.so", symbol: "_dispatch_worker_thread"),
        Frame(image: "libFoundation.so", symbol: "$s10Foundation6ThreadC4mainyyF"),
        Frame(image: "libc.so.6", symbol: "start_thread"),
        Frame(image: "libc.so.6", symbol: "__clone3"),
    ]
    static let middlePython: [Frame] = [
        Frame(image: "django.core.handlers.base", symbol: "_get_response"),
        Frame(image: "django.core.handlers.exception", symbol: "inner"),
        Frame(image: "django.utils.deprecation", symbol: "__call__"),
        Frame(image: "threading", symbol: "run"),
        Frame(image: "concurrent.futures.thread", symbol: "run"),
    ]
    static let middleJS: [Frame] = [
        Frame(image: "node_modules/react-dom/cjs/react-dom.production.min.js", symbol: "renderWithHooks"),
        Frame(image: "node_modules/react-dom/cjs/react-dom.production.min.js", symbol: "beginWork"),
        Frame(image: "node:internal/timers", symbol: "listOnTimeout"),
        Frame(image: "node_modules/express/lib/router/layer.js", symbol: "handle"),
    ]

    /// One occurrence of `site`: its own addresses, numbers, device, thread, and a stack of
    /// 20 to 40 frames whose callers below the crash site vary.
    func occurrence(of site: Site, _ rng: inout SplitMix64) -> Occurrence {
        func hex(_ digits: Int) -> String {
            var s = ""
            for _ in 0..<digits { s.append("0123456789abcdef".randomElement(using: &rng)!) }
            return s
        }
        var reason = ""
        var rest = Substring(site.reason)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            reason += rest[..<open]
            switch rest[rest.index(after: open)..<close] {
            case "a": reason += Int.random(in: 0..<6, using: &rng) == 0 ? "0x0" : "0x" + hex(Int.random(in: 6...12, using: &rng))
            case "n": reason += String(Int.random(in: 0...999, using: &rng))
            case "i": reason += String(Int.random(in: -50...120, using: &rng))
            case "t": reason += String(Int.random(in: 1...24, using: &rng))
            case "ms": reason += String(Int.random(in: 100...20_000, using: &rng))
            default: reason += rest[open...close]
            }
            rest = rest[rest.index(after: close)...]
        }
        reason += rest

        // Innermost first: machinery and system on top, the site's app frames, then a
        // varying chain of callers (system frames, and the app's deeper frames) to the bottom.
        let depth = Int.random(in: 20...40, using: &rng)
        var frames: [Frame] = site.top
        frames += site.app
        var middle: [Frame] = []
        let pool: [Frame]
        switch site.platform {
        case .linuxSwift: pool = Self.middleLinux
        case .python: pool = Self.middlePython
        case .javascript: pool = Self.middleJS
        default: pool = Self.middleIOS
        }
        while frames.count + middle.count + Self.bottomIOS.count < depth {
            middle.append(pool.randomElement(using: &rng)!)
            if Int.random(in: 0..<3, using: &rng) == 0 {
                let image = site.app[0].image
                middle.append(Frame(image: image, symbol: "callerOf\(Int.random(in: 0..<50, using: &rng))"))
            }
        }
        frames += middle

        var stack: [String] = []
        switch site.platform {
        case .iOSException, .iOSSignal, .iOSGuard, .iOSMarked, .systemOnly:
            frames += Self.bottomIOS
            for (index, frame) in frames.prefix(depth).enumerated() {
                let image = frame.image.padding(toLength: 26, withPad: " ", startingAt: 0)
                var line = "\(index)   \(image) 0x00000001\(hex(8)) \(frame.symbol) + \(Int.random(in: 4...900, using: &rng))"
                if site.platform == .iOSMarked {
                    // Sentry Cocoa and the SDK mark the app's frames (ShopKit is the app's own framework).
                    line += frame.image == "ShopKit" || frame.image == "Shop" ? " [app]" : " [system]"
                }
                stack.append(line)
            }
        case .linuxSwift:
            frames += [Frame(image: "libc.so.6", symbol: "__libc_start_main"), Frame(image: "shop-server", symbol: "_start")]
            for (index, frame) in frames.prefix(depth).enumerated() {
                let image = frame.image == "Shop" ? "shop-server" : frame.image
                let ra = index == 0 ? "" : "[ra] "
                stack.append(
                    "\(index) \(ra)0x0000\(hex(12)) \(frame.symbol) + \(Int.random(in: 4...900, using: &rng)) in \(image) at /build/Sources/Shop/File\(index).swift:\(Int.random(in: 1...400, using: &rng)):\(Int.random(in: 1...40, using: &rng))"
                )
            }
        case .python, .javascript:
            // Sentry-mapped frames: `function (module)`, innermost first; no addresses.
            for frame in frames.prefix(depth) { stack.append("\(frame.symbol) (\(frame.image))") }
        }
        return Occurrence(
            site: site.id, kind: site.kind, reason: reason, stack: stack, device: Self.devices.randomElement(using: &rng)!)
    }
}
