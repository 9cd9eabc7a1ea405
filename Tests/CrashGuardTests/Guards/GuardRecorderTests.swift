import CrashGuard
import CrashWire
import Foundation
import Testing

private final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current = Date(timeIntervalSince1970: 1_800_000_000)
    var now: Date {
        lock.lock()
        defer { lock.unlock() }
        return current
    }
    func advance(_ seconds: TimeInterval) {
        lock.lock()
        current += seconds
        lock.unlock()
    }
}

private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func next() -> String {
        lock.lock()
        count += 1
        lock.unlock()
        return "evaluated"
    }
    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }
}

@Suite("guard recorder")
struct GuardRecorderTests {
    @Test func switchedOffRecordsNothingAndBuildsNothing() {
        let counter = Counter()
        let (value, events) = recording([.null]) { () -> Int? in
            GuardRecorder.record(.container, reason: counter.next(), context: ["x": counter.next()])
            return [1][guarded: 4]
        }
        #expect(value == nil)  // the guard still does the safe thing
        #expect(events.isEmpty)
        #expect(counter.value == 0)  // the reason and context were never evaluated
        #expect(recording([.null]) { GuardRecorder.enabledKinds }.value == [.null])
        #expect(recording([.null]) { GuardRecorder.isEnabled(.null) && !GuardRecorder.isEnabled(.container) }.value)
    }

    @Test func switchesChangeAtRunTime() {
        let (_, events) = recording([]) { () -> Void in
            _ = [1][guarded: 4]
            GuardRecorder.setEnabled([.container])
            _ = [1][guarded: 5]
        }
        #expect(events.count == 1 && events.first?.reason.contains("index 5") == true)
    }

    @Test func eventCarriesCallSiteStackAndTimestamp() {
        let clock = ManualClock()
        let sink = GuardTestSink()
        GuardRecorder.withSink(sink, now: { clock.now }) {
            GuardRecorder.record(.custom, reason: "app-defined", context: ["k": "v"])
        }
        let event = sink.events.first
        #expect(sink.events.count == 1)
        #expect(event?.kind == .custom && event?.reason == "app-defined" && event?.fatal == false)
        #expect(event?.context["k"] == "v")
        #expect(event?.context["file"] == "CrashGuardTests/GuardRecorderTests.swift")
        #expect(event?.context["function"] == "eventCarriesCallSiteStackAndTimestamp()")
        #expect(event?.context["line"].flatMap(Int.init) != nil)
        #expect(event?.timestamp == clock.now)
        #expect(event.map { !$0.stack.isEmpty && $0.stack.count <= ReportLimits.maxFrames } == true)
        #expect(event?.stack.first?.contains("callStackSymbols") == false)
    }

    @Test func identicalReportsAreRateLimitedPerSite() {
        let clock = ManualClock()
        let sink = GuardTestSink()
        GuardRecorder.withSink(sink, rateLimit: .init(maxEvents: 3, interval: 60), now: { clock.now }) {
            let fire = { _ = [Int]()[guarded: 1] }  // one call site
            for _ in 0..<10 { fire() }  // 3 recorded, 7 suppressed
            _ = [Int]()[guarded: 2]  // another call site: its own budget
            clock.advance(30)
            fire()  // still in the window: suppressed (8)
            clock.advance(31)
            for _ in 0..<2 { fire() }  // a new window: recorded, the first carries the 8
        }
        let events = sink.events
        #expect(events.count == 3 + 1 + 2)
        #expect(events.map { $0.context["suppressed"] } == [nil, nil, nil, nil, "8", nil])
        #expect(events.map { $0.reason.contains("index 2") } == [false, false, false, true, false, false])
    }

    @Test func limitsKeepEventsWithinTheContract() throws {
        let (_, events) = recording {
            GuardRecorder.record(
                .custom, reason: String(repeating: "é", count: 6000),
                context: Dictionary(
                    uniqueKeysWithValues: (0..<100).map { ("key\($0)" + String(repeating: "k", count: 80), String(repeating: "v", count: 2000)) })
            )
        }
        try #require(events.count == 1)
        let event = events[0]
        #expect(event.reason.utf8.count <= ReportLimits.reasonBytes.upperBound)
        #expect(event.reason.utf8.count >= ReportLimits.reasonBytes.upperBound - 1)
        #expect(event.context.count == ReportLimits.maxContextEntries)
        #expect(event.context["file"] != nil && event.context["line"] != nil && event.context["function"] != nil)
        #expect(
            event.context.allSatisfy { $0.key.utf8.count <= ReportLimits.contextKeyBytes && $0.value.utf8.count <= ReportLimits.contextValueBytes })
        let report = Report(
            kind: event.kind, reason: event.reason, stack: event.stack, fatal: event.fatal,
            app: AppInfo(id: "t", version: "1"), context: event.context)
        #expect(report.validationError() == nil)
    }

    @Test func recorderIsThreadSafe() async {
        // Child tasks inherit the scope; 200 concurrent catches at one site.
        let limited = GuardTestSink()
        await GuardRecorder.withSink(limited, rateLimit: .init(maxEvents: 5, interval: 3600)) {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<200 { group.addTask { _ = [Int]()[guarded: 0] } }
            }
        }
        #expect(limited.events.count == 5)
        let unlimited = GuardTestSink()
        await GuardRecorder.withSink(unlimited) {
            await withTaskGroup(of: Void.self) { group in
                for i in 0..<200 { group.addTask { _ = [Int]()[guarded: i] } }
            }
        }
        #expect(unlimited.events.count == 200)
        #expect(Set(unlimited.events.compactMap { $0.context["index"] }).count == 200)
    }

    @Test func installAndUninstallTheProcessWideSink() {
        // Uses a kind no other test records process-wide, and filters by reason.
        let sink = GuardTestSink()
        let marker = "global-\(UUID().uuidString)"
        GuardRecorder.install(sink: sink, enabled: [.custom], rateLimit: .unlimited)
        #expect(GuardRecorder.isInstalled)
        Thread.detachNewThread { GuardRecorder.record(.custom, reason: marker) }  // no task scope there
        let deadline = Date().addingTimeInterval(5)
        while !sink.events.contains(where: { $0.reason == marker }) && Date() < deadline { usleep(10_000) }
        GuardRecorder.uninstall()
        #expect(sink.events.filter { $0.reason == marker }.count == 1)
        GuardRecorder.record(.custom, reason: marker)  // inside no scope, nothing installed
        #expect(sink.events.filter { $0.reason == marker }.count == 1)
    }
}
