import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import SeededRandom

/// Realistic ingest traffic, generated before any clock starts.
///
/// `signatures` distinct bugs, picked per report with a Zipf-like spread (the hottest about
/// `hottest` of all reports). Each bug is a fixed template (kind, class, selector, key
/// path, the first frames of its stack); every occurrence varies what the grouping
/// normalizes away: addresses, indices, counts, UUIDs, times, frame addresses and offsets,
/// plus the device, app version and a timestamp within the last day.
struct Traffic {
    /// One request body, gzip-compressed, with what verification needs.
    struct Body: Sendable {
        var gzip: [UInt8]
        var reports: Int
        var rawBytes: Int
        /// Signature hashes of its reports (as the server computes them).
        var signatures: [String]
    }

    let signatureCount: Int
    let zipf: Zipf
    let seed: UInt64

    init(signatures: Int, hottest: Double = 0.15, seed: UInt64) {
        signatureCount = max(1, signatures)
        zipf = Zipf(count: signatureCount, hottest: hottest)
        self.seed = seed
    }

    /// `requests` bodies of `batch` reports each, built on all cores.
    func bodies(requests: Int, batch: Int) async throws -> [Body] {
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let per = (requests + workers - 1) / workers
        let now = Date()
        return try await withThrowingTaskGroup(of: (Int, [Body]).self) { group in
            for w in 0..<workers {
                let range = (w * per)..<min(requests, (w + 1) * per)
                guard !range.isEmpty else { continue }
                group.addTask {
                    var rng = SplitMix64(seed: seed &+ UInt64(w) &* 0x1000_0001)
                    let encoder = JSONEncoder.crashWire()
                    var out: [Body] = []
                    out.reserveCapacity(range.count)
                    for _ in range {
                        var reports: [Report] = []
                        var signatures: [String] = []
                        for _ in 0..<batch {
                            let rank = zipf.sample(&rng)
                            let report = makeReport(rank: rank, now: now, rng: &rng)
                            signatures.append(
                                Grouping.signature(
                                    kind: report.kind, reason: report.reason, stack: report.stack,
                                    fingerprint: report.fingerprint, version: .newProjectDefault
                                ).hash)
                            reports.append(report)
                        }
                        let json = try encoder.encode(ReportBatch(reports: reports))
                        let gzip = try Deflater.compress(Array(json), format: .gzip)
                        out.append(Body(gzip: gzip, reports: batch, rawBytes: json.count, signatures: signatures))
                    }
                    return (w, out)
                }
            }
            var parts: [(Int, [Body])] = []
            for try await part in group { parts.append(part) }
            return parts.sorted { $0.0 < $1.0 }.flatMap(\.1)
        }
    }

    // MARK: Templates

    static let classes = [
        "FeedViewController", "ProfileCell", "CheckoutModel", "ImageCache", "SessionManager", "CartStore",
        "SearchResultsController", "VideoPlayerView", "SettingsDataSource", "MessageComposer", "MapAnnotationView",
        "OrderHistoryCell", "PaymentSheet", "LoginCoordinator", "NotificationCenterBridge", "PhotoPickerModel",
        "ChatThreadView", "OnboardingPager", "AnalyticsQueue", "DownloadTask",
    ]
    static let selectors = [
        "configure:", "reloadData", "objectForKey:", "lowercaseString", "setText:", "length", "count",
        "integerValue", "boolValue", "firstObject", "stringValue", "dismissAnimated:",
    ]
    static let keyPaths = ["user.profile.name", "contentOffset", "state", "player.rate", "cart.items", "frame"]
    static let images = ["Demo", "UIKitCore", "CoreFoundation", "Foundation", "libswiftCore.dylib", "libobjc.A.dylib"]
    /// Image names padded to 24 columns as in a Darwin backtrace (padded once: `padding` bridges to NSString).
    static let paddedImages = images.map { $0 + String(repeating: " ", count: max(1, 24 - $0.count)) }
    static let symbols = [
        "__exceptionPreprocess", "objc_exception_throw", "-[UITableView _updateVisibleCellsNow:]",
        "specialized Array.subscript.getter", "__CFRunLoopRun", "_dispatch_main_queue_drain", "UIApplicationMain",
        "-[UIView(CALayerDelegate) layoutSublayersOfLayer:]", "CA::Transaction::commit()", "__CFNOTIFICATIONCENTER_IS_CALLING_OUT_TO_AN_OBSERVER__",
        "_CFXNotificationPost", "-[NSNotificationCenter postNotificationName:object:userInfo:]", "start", "main",
    ]
    static let models = [
        "iPhone15,2", "iPhone14,5", "iPhone16,1", "iPhone13,2", "iPhone14,2", "iPad13,4", "iPhone12,1", "iPad14,1",
        "iPhone15,4", "iPhone16,2", "iPhone11,8", "iPad7,11",
    ]
    static let versions = ["3.4.0", "3.3.2", "3.3.1", "3.3.0", "3.2.0", "3.1.4", "3.0.0", "2.9.1", "2.9.0", "2.8.0"]
    static let osVersions = ["17.4", "17.3.1", "17.2", "16.7.5", "16.6", "18.0", "17.5", "15.8"]
    static let modelZipf = Zipf(count: models.count, hottest: 0.3)
    static let versionZipf = Zipf(count: versions.count, hottest: 0.4)

    /// The template of bug `rank`: kind, the identifying part of the reason, and its top frames.
    /// Distinct ranks differ in a name the normalizer keeps (class, selector, identifier digits).
    func makeReport(rank: Int, now: Date, rng: inout SplitMix64) -> Report {
        let cls = Self.classes[rank % Self.classes.count]
        let sel = Self.selectors[(rank / Self.classes.count) % Self.selectors.count]
        let variant = rank / (Self.classes.count * Self.selectors.count)
        let name = variant == 0 ? cls : "\(cls)V\(variant)"
        func hex(_ digits: Int) -> String {
            String(rng.next() & ((1 << (4 * UInt64(digits))) - 1), radix: 16)
        }
        let n = Int.random(in: 1...5000, using: &rng)
        let kinds: [ReportKind] = [
            .unrecognizedSelector, .container, .kvo, .null, .signal, .exception, .string, .cast, .timer, .mainThread,
        ]
        let kind = kinds[(rank / 3) % kinds.count]
        let reason: String
        switch kind {
        case .unrecognizedSelector:
            reason =
                "-[\(name) \(sel)]: unrecognized selector sent to instance 0x\(hex(12)) (session \(UUID(rng: &rng)))"
        case .container:
            reason = "*** -[__NSArrayI objectAtIndex:]: index \(n) beyond bounds [0 .. \(n / 2)] in -[\(name) \(sel)]"
        case .kvo:
            reason =
                "Cannot remove an observer <\(name) 0x\(hex(12))> for the key path \"\(Self.keyPaths[rank % Self.keyPaths.count])\" from <Demo.Model: 0x\(hex(12))> because it is not registered as an observer."
        case .null:
            reason = "-[NSNull \(sel)] sent to NSNull in \(name).\(sel) at \(RFC3339.format(now.addingTimeInterval(-Double(n))))"
        case .signal:
            reason =
                "Swift/ContiguousArrayBuffer.swift:\(600 + rank % 97): Fatal error: Index out of range in \(name); EXC_BREAKPOINT (code=1, subcode=0x\(hex(9)))"
        case .exception:
            reason =
                "Error Domain=\(name)Error Code=\(rank % 13) \"The operation couldn’t be completed.\" request \(UUID(rng: &rng)) after \(n) ms"
        case .string:
            reason = "-[__NSCFString substringToIndex:]: Index \(n) out of bounds; string length \(n / 3) in \(name).\(sel)"
        case .cast:
            reason = "Could not cast value of type '__NSCFNumber' (0x\(hex(12))) to 'NSString' in \(name).\(sel)"
        case .timer:
            reason = "Timer target <\(name): 0x\(hex(12))> was deallocated; timer invalidated after \(n) fires (\(sel))"
        default:
            reason = "Main Thread Checker: UI API called on a background thread: -[\(name) \(sel)] PID: \(n), TID: \(n * 7)"
        }
        // Guards append where they caught it; keeps every template distinct after normalization.
        let reasonWithSite = reason + " [caught in -[\(name) \(sel)]]"
        let depth = Int.random(in: 20...40, using: &rng)
        let stack = (0..<depth).map { f -> String in
            // The top three frames name the bug; deeper frames are shared by everything.
            let symbol = f < 3 ? "-[\(name) \(Self.selectors[(rank + f) % Self.selectors.count])]" : Self.symbols[(rank + f) % Self.symbols.count]
            let image = f < 3 ? Self.paddedImages[0] : Self.paddedImages[(rank + f) % Self.paddedImages.count]
            return "\(f)   \(image) 0x00000001\(hex(8)) \(symbol) + \(Int.random(in: 4...4000, using: &rng))"
        }
        let model = Self.models[Self.modelZipf.sample(&rng)]
        let version = Self.versions[Self.versionZipf.sample(&rng)]
        return Report(
            id: UUID(rng: &rng),
            timestamp: now.addingTimeInterval(-Double.random(in: 1...86_000, using: &rng)),
            kind: kind,
            reason: reasonWithSite,
            stack: stack,
            fatal: kind == .signal || kind == .exception,
            app: AppInfo(id: "com.example.demo", version: version, build: "\(4000 + Self.versions.firstIndex(of: version)!)"),
            device: DeviceInfo(
                os: model.hasPrefix("iPad") ? "iPadOS" : "iOS",
                osVersion: Self.osVersions[Int.random(in: 0..<Self.osVersions.count, using: &rng)],
                model: model, id: "install-\(Int.random(in: 0..<50_000, using: &rng))"),
            context: ["guard": kind.rawValue, "action": "returned nil", "screen": name]
        )
    }
}

extension UUID {
    init(rng: inout SplitMix64) {
        let a = rng.next(), b = rng.next()
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: a >> (8 * UInt64(i)))
            bytes[8 + i] = UInt8(truncatingIfNeeded: b >> (8 * UInt64(i)))
        }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        self.init(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}
