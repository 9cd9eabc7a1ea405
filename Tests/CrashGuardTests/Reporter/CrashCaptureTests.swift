import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Each test runs a child process (a Swift Testing exit test) that starts CrashGuard with
/// crash capture in a fixed directory and then dies the way an app would; the parent checks
/// the child died by the very signal it would have died by without CrashGuard, and that the
/// next start turns the record left behind into the expected `signal` report.
@Suite("Crash capture: a process that dies leaves a report for the next start")
struct CrashCaptureTests {
    #if !os(Windows)
    @Test("index out of range: SIGILL/SIGTRAP, the runtime's message is the reason")
    func indexOutOfRange() async throws {
        let directory = CrashChild.prepare("index")
        await #expect(processExitsWith: .signal(CrashChild.trapSignal)) {
            CrashChild.run("index") { CrashChild.indexOutOfRange() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason.contains("Index out of range"))
        #expect(report.context?["signal"] == CrashChild.trapSignalName)
        #expect(report.stack?.contains { $0.contains("indexOutOfRange") } == true)
    }

    @Test("force unwrap of nil")
    func forceUnwrap() async throws {
        let directory = CrashChild.prepare("unwrap")
        await #expect(processExitsWith: .signal(CrashChild.trapSignal)) {
            CrashChild.run("unwrap") { CrashChild.forceUnwrap() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason.contains("Unexpectedly found nil while unwrapping an Optional value"))
        #expect(report.stack?.contains { $0.contains("forceUnwrap") } == true)
    }

    @Test("as! failure: the runtime's cast message")
    func failedCast() async throws {
        let directory = CrashChild.prepare("cast")
        await #expect(processExitsWith: .signal(CrashChild.castSignal)) {
            CrashChild.run("cast") { CrashChild.failedCast() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason.contains("Could not cast value of type"))
        #expect(report.reason.contains("String"))
    }

    @Test("fatalError: its message is the reason")
    func fatalErrorCall() async throws {
        let directory = CrashChild.prepare("fatal")
        await #expect(processExitsWith: .signal(CrashChild.trapSignal)) {
            CrashChild.run("fatal") { CrashChild.callFatalError() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason.contains("Fatal error: CrashGuard test fatal error"))
        #expect(report.stack?.contains { $0.contains("callFatalError") } == true)
    }

    @Test("a bad pointer write: SIGSEGV at the address written")
    func badPointerWrite() async throws {
        let directory = CrashChild.prepare("pointer")
        await #expect(processExitsWith: .signal(SIGSEGV)) {
            CrashChild.run("pointer") { CrashChild.writeBadPointer() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason == "SIGSEGV (SEGV_MAPERR) at 0x10")
        #expect(report.context?["signal.address"] == "0x10")
        #expect(report.stack?.first?.contains("writeBadPointer") == true)
    }

    @Test("stack overflow: handled on the alternate signal stack")
    func stackOverflow() async throws {
        let directory = CrashChild.prepare("overflow")
        await #expect(processExitsWith: .signal(SIGSEGV)) {
            CrashChild.run("overflow") { _ = CrashChild.recurse(0) }
        }
        let report = try CrashChild.report(directory)
        #expect(report.context?["signal"] == "SIGSEGV")
        #expect(report.reason.hasPrefix("SIGSEGV"))
        #expect((report.stack?.count ?? 0) >= 64)
        #expect(report.stack?.prefix(8).contains { $0.contains("recurse") } == true)
    }

    @Test("abort(): SIGABRT is handed on unchanged")
    func abortCall() async throws {
        let directory = CrashChild.prepare("abort")
        await #expect(processExitsWith: .signal(SIGABRT)) {
            CrashChild.run("abort") { abort() }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason.hasPrefix("SIGABRT"))
        #expect(report.context?["signal.address"] == nil)
    }
    #endif

    @Test("a record parses, including a multi-line runtime message and a missing end")
    func recordParsing() throws {
        let text =
            "CGCRASH 1\ntime 1800000000 250\nsignal 4\ncode 2\naddress 0x5555\npc 0x5555\nframe 0x5555\nframe 0x6666\nmessage\nline one\nline two\n\nend\n"
        let record = try #require(CrashRecord(parsing: Data(text.utf8)))
        #expect(record.signal == 4)
        #expect(record.code == 2)
        #expect(record.pc == 0x5555)
        #expect(record.frames == [0x5555, 0x6666])
        #expect(record.message == "line one\nline two")
        #expect(record.time == Date(timeIntervalSince1970: 1_800_000_000.25))
        let cut = try #require(CrashRecord(parsing: Data("CGCRASH 1\nsignal 11\ncode 1\naddress 0x0\npc 0x1\nfra".utf8)))
        #expect(cut.frames.isEmpty && cut.message == nil)
        #expect(CrashRecord(parsing: Data()) == nil)
        #expect(CrashRecord(parsing: Data("garbage".utf8)) == nil)
    }

    @Test("a version 2 record parses: id, registers, length-prefixed message and scope, threads, a truncated end")
    func recordVersion2() throws {
        let message = "Fatal error: two\nlines"
        let scope = "user.id\tu-1\nbreadcrumb.00\t2026-01-01T00:00:00Z [ui] tapped\n"
        let text = """
            CGCRASH 2
            id 2B4B354D-5A62-4646-851C-3A7B276754A2
            time 1800000000 5
            signal 6
            code -6
            address 0x445f
            pc 0x7f60
            insn 0f0b4883
            register rip 0x7f60
            register rsp 0x7ffc
            message \(message.utf8.count)
            \(message)
            scope \(scope.utf8.count)
            \(scope)
            thread 17 crashing main
            frame 0x7f60
            frame 0x5500
            thread 18 other worker one
            frame 0x7f61
            unanswered 2
            truncated 11
            end

            """
        let record = try #require(CrashRecord(parsing: Data(text.utf8)))
        #expect(record.version == 2)
        #expect(record.id == UUID(uuidString: "2b4b354d-5a62-4646-851c-3a7b276754a2"))
        #expect(record.instruction == [0x0f, 0x0b, 0x48, 0x83])
        #expect(record.registers.map { $0.name } == ["rip", "rsp"])
        #expect(record.message == message)
        #expect(record.scope.map { $0.key } == ["user.id", "breadcrumb.00"])
        #expect(record.threads.map(\.id) == [17, 18])
        #expect(record.threads[1].name == "worker one" && !record.threads[1].crashing)
        #expect(record.frames == [0x7f60, 0x5500])
        #expect(record.unanswered == 2)
        #expect(record.truncated)
        #expect(CrashCapture.trapInstruction(record) == "ud2")
    }

    @Test("frames of this process symbolicate through the image map, demangled")
    func symbolication() throws {
        let images = LoadedImage.current()
        #expect(!images.isEmpty)
        #expect(images.contains { !$0.buildID.isEmpty })
        let address = UInt64(UInt(bitPattern: unsafeBitCast(CrashChild.symbolProbe as @convention(c) () -> Void, to: UnsafeRawPointer.self)))
        let symbolicator = Symbolicator(crashed: images, current: images)
        let frame = symbolicator.frame(0, address: address)
        #expect(frame.hasPrefix("0 "))
        #expect(frame.contains("symbolProbe"))
        #expect(frame.hasSuffix(" + 0"))
        // An image that is not loaded here (or was rebuilt) keeps image + offset.
        var moved = images
        for i in moved.indices { moved[i].buildID = "00" }
        let raw = Symbolicator(crashed: moved, current: images).frame(3, address: address)
        #expect(raw.hasPrefix("3 "))
        #expect(raw.contains(" + "))
        #expect(!raw.contains("symbolProbe"))
        #expect(Symbolicator.demangle("$sSi") == "Swift.Int")
    }
}

/// The next `start` (through the public entry point) queues the previous run's crash,
/// and `run { }` records an uncaught error; these share the process-wide reporter.
@Suite("CrashGuard entry point", .serialized)
struct CrashGuardEntryTests {
    #if !os(Windows)
    @Test("start turns the pending crash record into a queued signal report and uploads it")
    func nextStartQueuesCrash() async throws {
        let directory = CrashChild.prepare("next-start")
        await #expect(processExitsWith: .signal(SIGSEGV)) {
            CrashChild.run("next-start") { CrashChild.writeBadPointer() }
        }
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        var config = reporterTestConfiguration(directory: directory, transport: transport)
        config.captureCrashes = true
        config.device = DeviceInfo(os: "Linux", osVersion: "1", model: "m")
        let reporter = try CrashGuard.start(config, clock: SystemReporterClock(), backoff: Backoff())
        await CrashCapture.waitForPrevious(timeout: .seconds(10))  // the record is processed off the launch thread
        #expect(await reporter.flush(timeout: .seconds(10)))
        let report = try #require(transport.reports.first)
        #expect(report.kind == .signal)
        #expect(report.fatal == true)
        #expect(report.app == CrashChild.app)  // the crashed run's app, from its session file
        #expect(report.device?.id == CrashChild.deviceID)
        #expect(report.context?["image.0"]?.contains("0x") == true)
        #expect(report.validationError(now: Date()) == nil)
        // Consumed: a second start finds nothing.
        #expect(CrashCapture.pendingReport(directory: directory, app: config.app, device: config.device) == nil)
        await CrashGuard.stop()
    }
    #endif

    @Test("an error escaping run { } is recorded as kind exception, then thrown on")
    func uncaughtError() async throws {
        struct Boom: Error, CustomStringConvertible { var description: String { "boom" } }
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        _ = try CrashGuard.start(config, clock: SystemReporterClock(), backoff: Backoff())
        #expect(throws: Boom.self) {
            try CrashGuard.run { throw Boom() }
        }
        #expect(CrashGuard.record("custom thing", context: ["k": "v"]))
        #expect(await CrashGuard.flush(timeout: .seconds(10)))
        let reports = transport.reports
        #expect(reports.count == 2)
        #expect(reports.first?.kind == .exception)
        #expect(reports.first?.fatal == true)
        #expect(reports.first?.reason.contains("Error raised at top level") == true)
        #expect(reports.first?.context?["error.type"]?.contains("Boom") == true)
        #expect(reports.last?.kind == .custom)
        #expect(reports.last?.context?["k"] == "v")
        #expect(reports.last?.context?["file"]?.hasSuffix("CrashCaptureTests.swift") == true)
        await CrashGuard.stop()
        #expect(!CrashGuard.record("after stop"))
    }
}

/// What the crashing children do. Exit-test bodies capture nothing, so everything is
/// reached by fixed names.
enum CrashChild {
    static let app = AppInfo(id: "com.example.crasher", version: "9.8.7", build: "1")
    static let deviceID = "crash-child-device"

    /// What a Swift runtime trap raises on this architecture, and the instruction's name.
    #if arch(arm64) || arch(aarch64)
    static let trapSignal = SIGTRAP
    static let trapSignalName = "SIGTRAP"
    static let trapInstruction = "brk"
    #else
    static let trapSignal = SIGILL
    static let trapSignalName = "SIGILL"
    static let trapInstruction = "ud2"
    #endif
    /// `as!` failure ends in the runtime's `swift::fatalError`, which calls `abort()`.
    static let castSignal = SIGABRT

    static func directory(_ name: String) -> URL {
        FileManager.default.temporaryDirectory
            .appendingPathComponent("crashguard-exit-tests", isDirectory: true)
            .appendingPathComponent(name, isDirectory: true)
    }

    /// Empties the child's directory (in the parent, before the child runs).
    static func prepare(_ name: String) -> URL {
        let url = directory(name)
        try? FileManager.default.removeItem(at: url)
        return url
    }

    /// In the child: starts CrashGuard, then crashes on this same thread (so a stack
    /// overflow lands on the alternate stack `start` gave it).
    static func run(_ name: String, crash: () -> Void) {
        let config = CrashGuard.Configuration(
            serverURL: URL(string: "http://127.0.0.1:9")!,
            ingestKey: "ik_test",
            appID: app.id, appVersion: app.version, appBuild: app.build,
            device: DeviceInfo(os: "Linux", osVersion: "1", model: "m", id: deviceID),
            directory: directory(name),
            uploadEnabled: false,
            captureCrashes: true,
            log: { _ in }
        )
        do { try CrashGuard.start(config) } catch { exit(99) }
        crash()
        exit(98)
    }

    /// In the parent: the report the next start would make.
    static func report(_ directory: URL, kind: ReportKind = .signal) throws -> Report {
        let report = try #require(
            CrashCapture.pendingReport(
                directory: directory, app: AppInfo(id: "other", version: "0"), device: DeviceInfo(), now: Date()))
        #expect(report.kind == kind)
        #expect(report.fatal == true)
        #expect(report.app == app)
        #expect(report.validationError(now: Date()) == nil)
        #expect(report.stack?.isEmpty == false)
        return report
    }

    static var never: String? { ProcessInfo.processInfo.environment["CRASHGUARD_NEVER_SET"] }

    @inline(never) static func indexOutOfRange() {
        let numbers = [1, 2, 3]
        let index = Int(never ?? "5")!
        print(numbers[index])
    }

    @inline(never) static func forceUnwrap() {
        let value: String? = never
        print(value!)
    }

    @inline(never) static func failedCast() {
        let value: Any = Int(ProcessInfo.processInfo.processIdentifier)
        print(value as! String)
    }

    @inline(never) static func callFatalError() {
        fatalError("CrashGuard test fatal error")
    }

    @inline(never) static func writeBadPointer() {
        let pointer = UnsafeMutablePointer<Int>(bitPattern: 0x10 + (never?.count ?? 0))!
        pointer.pointee = 42
    }

    @inline(never) static func recurse(_ depth: Int) -> Int {
        var frame = (depth, depth, depth, depth, depth, depth, depth, depth)
        return withUnsafeMutablePointer(to: &frame) { $0.pointee.0 + recurse(depth + 1) }
    }

    /// A C-callable function whose address the symbolication test looks up.
    static let symbolProbe: @convention(c) () -> Void = { symbolProbeTarget() }
}

@_cdecl("crashguard_test_symbolProbe")
@inline(never) func symbolProbeTarget() {}
