import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The example app (`Examples/crashguard-example`, built `-O` like a shipped app) crashes
/// in a child process the way a user's app would; the test reads the record it left with
/// the code the next start runs, and checks the reason, the first frame (the code that
/// crashed, not `raise`/`abort`/the runtime), every thread and the scope.
@Suite("Crash capture in an -O build: reason, first in-app frame, all threads")
struct ReleaseCrashTests {
    struct Crash {
        var signal: Int32
        var report: Report
        var record: CrashRecord
        var directory: URL
    }

    /// The example binary: `CRASHGUARD_EXAMPLE`, else beside the test bundle in `.build/<config>/`.
    static func example() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["CRASHGUARD_EXAMPLE"] { return URL(fileURLWithPath: path) }
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0])]
        if let path = Bundle.main.executablePath { candidates.append(URL(fileURLWithPath: path)) }
        candidates.append(Bundle.main.bundleURL)
        for start in candidates {
            var directory = start.deletingLastPathComponent()
            for _ in 0..<4 {
                let binary = directory.appendingPathComponent("crashguard-example")
                if FileManager.default.isExecutableFile(atPath: binary.path) { return binary }
                directory = directory.deletingLastPathComponent()
            }
        }
        Issue.record("crashguard-example not found beside \(CommandLine.arguments[0]); build it (swift build --build-tests builds it)")
        throw CancellationError()
    }

    static func crash(_ kind: String) throws -> Crash {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("crashguard-release-\(kind)-\(UUID().uuidString.prefix(8))", isDirectory: true)
        let process = Process()
        process.executableURL = try example()
        process.arguments = ["crash", kind, directory.path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal, "the example must die by its signal, as without CrashGuard")
        let data = try Data(contentsOf: CrashCapture.recordURL(directory))
        let record = try #require(CrashRecord(parsing: data))
        let report = try #require(
            CrashCapture.pendingReport(
                directory: directory, app: AppInfo(id: "other", version: "0"), device: DeviceInfo(), now: Date()))
        #expect(report.kind == .signal)
        #expect(report.fatal == true)
        #expect(report.app.id == "com.example.crashguard-example")
        #expect(report.validationError(now: Date()) == nil)
        return Crash(signal: process.terminationStatus, report: report, record: record, directory: directory)
    }

    /// The checks every crash of the example shares: all threads, registers, scope, fixed id.
    static func checkCommon(_ crash: Crash, kind: String) throws {
        let record = crash.record
        let report = crash.report
        // All threads: the crashing one and the two named workers, with their stacks.
        #expect(record.threads.first?.crashing == true)
        let others = record.threads.filter { !$0.crashing }
        #expect(others.count >= 2, "unanswered: \(record.unanswered)")
        let names = "\(others.map(\.name)), unanswered: \(record.unanswered)"
        #expect(others.contains { $0.name == "example-worker1" && !$0.frames.isEmpty }, "\(names)")
        #expect(others.contains { $0.name == "example-worker2" && !$0.frames.isEmpty }, "\(names)")
        let threadEntries = (report.context ?? [:]).filter { $0.key.hasPrefix("thread.") && $0.key != "thread.crashing" }
        #expect(threadEntries.values.contains { $0.contains("example-worker1") })
        #expect(Int(report.context?["threads.count"] ?? "0") ?? 0 >= 3)
        // Registers of the crashing thread.
        #if arch(x86_64)
        #expect(report.context?["registers"]?.contains("rip=0x") == true)
        #endif
        // The scope the app set before crashing, from the handler's preallocated copy.
        #expect(report.context?["user.id"] == "user-42")
        #expect(report.context?["tag.example.kind"] == kind)
        #expect(report.context?["breadcrumb.00"]?.contains("[example] about to crash: \(kind)") == true)
        // The id was fixed when the record was written: sending it again is a duplicate.
        let id = try #require(record.id)
        #expect(report.id == id)
        let again = try #require(
            CrashCapture.pendingReport(
                directory: crash.directory, app: AppInfo(id: "other", version: "0"), device: DeviceInfo(), now: Date()))
        #expect(again.id == id)
    }

    @Test(
        "Swift runtime traps: the reason names the trapping function, the stack starts in it",
        arguments: [
            ("index", "crashIndexOutOfRange"), ("unwrap", "crashForceUnwrap"), ("overflow", "crashOverflow"),
        ])
    func traps(kind: String, function: String) throws {
        let crash = try Self.crash(kind)
        #expect(crash.signal == CrashChild.trapSignal)
        #expect(crash.report.reason.hasPrefix("Swift runtime trap (\(CrashChild.trapInstruction)) in "))
        #expect(crash.report.reason.contains(function))
        let stack = crash.report.stack?.joined(separator: "\n") ?? ""
        #expect(crash.report.stack?.first?.contains(function) == true, "\(stack)")
        #expect(crash.report.stack?.first?.contains("crashguard-example") == true)
        try Self.checkCommon(crash, kind: kind)
    }

    @Test("abort(): raise/abort/pthread_kill are skipped, so two call sites are two signatures")
    func aborts() throws {
        let first = try Self.crash("abort")
        let second = try Self.crash("abort2")
        for crash in [first, second] {
            #expect(crash.signal == SIGABRT)
            #expect(crash.report.reason == "SIGABRT (SI_TKILL)")
            let top = crash.report.stack?.prefix(3).joined(separator: "\n") ?? ""
            for machinery in [" raise ", " abort ", " pthread_kill", "__pthread_kill"] {
                #expect(!top.contains(machinery), "\(machinery) in \(top)")
            }
            #expect(Int(crash.report.context?["crash.machineryFrames"] ?? "0") ?? 0 >= 2)
        }
        #expect(first.report.stack?.first?.contains("crashAbortInParser") == true, "\(first.report.stack ?? [])")
        #expect(second.report.stack?.first?.contains("crashAbortInLoader") == true, "\(second.report.stack ?? [])")
        try Self.checkCommon(first, kind: "abort")
    }

    @Test("fatalError: its message is the reason, the stack starts at the caller of fatalError")
    func fatalErrorMessage() throws {
        let crash = try Self.crash("fatal")
        #expect(crash.signal == CrashChild.trapSignal)
        #expect(crash.report.reason.contains("example fatal error"))
        #expect(crash.report.stack?.first?.contains("crashFatalError") == true, "\(crash.report.stack ?? [])")
        try Self.checkCommon(crash, kind: "fatal")
    }

    @Test("a bad pointer: SIGSEGV at the address, the stack starts in the function that wrote")
    func badPointer() throws {
        let crash = try Self.crash("segv")
        #expect(crash.signal == SIGSEGV)
        #expect(crash.report.reason == "SIGSEGV (SEGV_MAPERR) at 0x10")
        #expect(crash.report.stack?.first?.contains("crashBadPointer") == true)
        try Self.checkCommon(crash, kind: "segv")
    }

    @Test("stack overflow: recorded on the alternate stack, the walk bounded by the thread's stack")
    func stackOverflow() throws {
        let crash = try Self.crash("stack")
        #expect(crash.signal == SIGSEGV)
        #expect((crash.report.stack?.count ?? 0) >= 64)
        #expect(crash.report.stack?.prefix(4).contains { $0.contains("crashStackOverflow") } == true)
        #expect(!crash.record.truncated)
    }

    @Test("a fault inside the handler ends the record cleanly, and the process still dies by its signal")
    func faultInHandler() throws {
        let crash = try Self.crash("handler-fault")
        #expect(crash.signal == SIGSEGV)
        #expect(crash.record.truncated)
        #expect(crash.record.signal == SIGSEGV)
        #expect(crash.record.id != nil)
        #expect(crash.report.context?["crash.truncated"] != nil)
        #expect(crash.report.reason == "SIGSEGV (SEGV_MAPERR) at 0x10")
        // The header was written before the walk: the PC still names the function.
        #expect(crash.report.stack?.first?.contains("crashBadPointer") == true)
        #expect(crash.report.context?["user.id"] == "user-42")
    }
}
