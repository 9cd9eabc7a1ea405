import ArgumentParser
import CrashGrouping
import CrashWire
import Foundation
import SeededRandom

/// `crash-bench normalize`: how many reports per second one core normalizes and groups.
///
/// Inputs are built from a seed before the clock starts (the same seed, the same inputs):
/// realistic reasons of about 200 bytes (ObjC,
/// KVO, Swift runtime, networking) with varying addresses, indices, UUIDs and times, each
/// with 20 Darwin frames. For each grouping version (both by default, v1 then v2), three
/// figures, single-threaded, per second of the thread's CPU time (so that other processes
/// on the machine do not count; the wall-clock rate is printed beside each):
/// - `signature`: `Grouping.signature` (normalized reason, frame selection, normalized
///   frames, SHA-256), what ingest runs for each report: the figure of the target (issues
///   13 and 18, 200,000 reports/s on one core);
/// - `normalize`: `normalize(reason:)` and `normalize(frame:)` on all 20 frames;
/// - `both`: the two together.
struct NormalizeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "normalize",
        abstract: "Reports normalized and signed per second on one core, v1 and v2."
    )

    @Option(help: "Grouping version: v1, v2 or both.")
    var grouping: String = "both"

    @Option(help: "Distinct generated reports (cycled through).")
    var reports: Int = 1_000

    @Option(help: "Seconds to measure each figure.")
    var seconds: Double = 3

    @Option(help: "Seed of the generated reports: the same seed makes the same inputs, so that builds compare.")
    var seed: UInt64 = 1

    func run() async throws {
        let versions: [GroupingVersion]
        if grouping == "both" {
            versions = [.v1, .v2]
        } else if let version = GroupingVersion(rawValue: grouping) {
            versions = [version]
        } else {
            throw ValidationError("--grouping is v1, v2 or both")
        }
        let inputs = Self.makeInputs(count: max(1, reports), seed: seed)
        let reasonBytes = inputs.reduce(0) { $0 + $1.reason.utf8.count } / inputs.count
        let stackBytes = inputs.reduce(0) { $0 + $1.stack.reduce(0) { $0 + $1.utf8.count } } / inputs.count
        let load = Bench.shell("cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || sysctl -n vm.loadavg")
        print("machine: \(Bench.shell("uname -m")), \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(load); one thread used")
        print("inputs: \(inputs.count) reports (seed \(seed)), reason \(reasonBytes) B, 20 frames \(stackBytes) B on average")

        func printRate(_ version: GroupingVersion, _ label: String, _ rate: Double) {
            let padded = label.padding(toLength: 42, withPad: " ", startingAt: 0)
            print(String(format: "%@ %@ %10.0f reports/s per core  (%.2f µs each)", version.rawValue, padded, rate, 1e6 / rate))
        }
        func sign(_ report: Input, _ version: GroupingVersion) -> Int {
            Grouping.signature(kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: nil, version: version).hash.utf8.count
        }
        func normalizeFrames(_ report: Input, _ version: GroupingVersion) -> Int {
            report.stack.reduce(0) { $0 &+ Grouping.normalize(frame: $1, version: version).utf8.count }
        }
        // The signature lines first: `scripts/bench` reports them.
        for version in versions {
            printRate(version, "signature (normalize + frames + SHA-256):", Bench.callsPerCPUSecond(inputs, seconds: seconds) { sign($0, version) })
        }
        for version in versions {
            let normalize = Bench.callsPerCPUSecond(inputs, seconds: seconds) {
                Grouping.normalize(reason: $0.reason, version: version).utf8.count &+ normalizeFrames($0, version)
            }
            printRate(version, "normalize only (reason + 20 frames):", normalize)
            printRate(
                version, "both (signature + 20 normalized frames):",
                Bench.callsPerCPUSecond(inputs, seconds: seconds) { sign($0, version) &+ normalizeFrames($0, version) })
        }
    }

    struct Input: Sendable {
        var kind: ReportKind
        var reason: String
        var stack: [String]
    }

    static func makeInputs(count: Int, seed: UInt64) -> [Input] {
        var rng = SplitMix64(seed: seed)
        func hex(_ digits: Int) -> String {
            String((0..<digits).map { _ in "0123456789abcdef".randomElement(using: &rng)! })
        }
        func uuid() -> String {
            let bits = (rng.next(), rng.next())
            return withUnsafeBytes(of: bits) { UUID(uuid: $0.load(as: uuid_t.self)).uuidString }
        }
        let classes = ["FeedViewController", "ProfileCell", "CheckoutModel", "ImageCache", "SessionManager", "Student"]
        let selectors = ["configure:", "reloadData", "objectForKey:", "lowercaseString", "setText:", "length"]
        let images = ["Demo", "UIKitCore", "CoreFoundation", "Foundation", "libswiftCore.dylib", "libobjc.A.dylib"]
        let symbols = [
            "-[FeedViewController tableView:cellForRowAtIndexPath:]", "closure #1 in FeedLoader.load(page:)",
            "__exceptionPreprocess", "objc_exception_throw", "-[UITableView _updateVisibleCellsNow:]",
            "specialized Array.subscript.getter", "$s4Demo14ViewControllerC11viewDidLoadyyF", "__CFRunLoopRun",
            "_dispatch_main_queue_drain", "UIApplicationMain",
        ]
        return (0..<count).map { i in
            let cls = classes.randomElement(using: &rng)!
            let sel = selectors.randomElement(using: &rng)!
            let n = Int.random(in: 1...500, using: &rng)
            let reason: String
            let kind: ReportKind
            switch i % 5 {
            case 0:
                kind = .unrecognizedSelector
                reason =
                    "2026-11-21 10:\(10 + i % 50):32.340558+0800 Demo[\(2900 + i):\(449839 + n)] -[\(cls) \(sel)]: unrecognized selector sent to instance 0x\(hex(12)) (guarded, session \(uuid()))"
            case 1:
                kind = .container
                reason =
                    "*** -[__NSArrayI objectAtIndex:]: index \(n) beyond bounds [0 .. \(n - 1)] in -[\(cls) \(sel)] at 2026-11-21T10:00:\(10 + i % 50)Z, thread \(i % 9)"
            case 2:
                kind = .kvo
                reason =
                    "Cannot remove an observer <\(cls) 0x\(hex(12))> for the key path \"user.profile.name\" from <Demo.Model: 0x\(hex(12))> because it is not registered as an observer."
            case 3:
                kind = .signal
                reason =
                    "Swift/ContiguousArrayBuffer.swift:\(600 + n): Fatal error: Index out of range in \(cls).\(sel) (index \(n), count \(n / 2)); EXC_BREAKPOINT (code=1, subcode=0x\(hex(9)))"
            default:
                kind = .exception
                reason =
                    "Error Domain=NSURLErrorDomain Code=-1001 \"The request timed out.\" UserInfo={NSErrorFailingURLStringKey=https://api.example.com/v1/feed?page=\(n)&since=\(1_732_183_200 + i)}"
            }
            let stack = (0..<20).map { f in
                let image = images[(i + f) % images.count]
                let symbol = symbols[(i * 7 + f) % symbols.count]
                return
                    "\(f)   \(image.padding(toLength: 30, withPad: " ", startingAt: 0)) 0x0000000\(hex(9)) \(symbol) + \(Int.random(in: 4...4000, using: &rng))"
            }
            // Guards append where they caught it; brings reasons to about 200 bytes.
            let suffix = " [guard: \(cls) on \(i % 3 == 0 ? "main" : "background") queue]"
            return Input(kind: kind, reason: reason + suffix, stack: stack)
        }
    }
}
