import CrashGuardObjC
import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An uncaught C++ or Objective-C exception is noted (type or name, reason, the throw
/// site's stack) before the abort, and the record of that abort becomes one `exception`
/// report whose first frame is the function that threw.
@Suite("Exception capture")
struct ExceptionCaptureTests {
    #if os(Linux)
    @Test("an uncaught std::runtime_error: kind exception, its type and what(), the thrower first")
    func uncaughtCxxException() async throws {
        let directory = CrashChild.prepare("cxx-exception")
        await #expect(processExitsWith: .signal(SIGABRT)) {
            CrashChild.run("cxx-exception") { CrashCapture.throwUncaughtCxxException("disk on fire") }
        }
        let report = try CrashChild.report(directory, kind: .exception)
        #expect(report.reason == "std::runtime_error: disk on fire")
        #expect(report.context?["exception.name"] == "std::runtime_error")
        #expect(report.context?["exception.runtime"] == "cxx")
        #expect(report.context?["signal"] == "SIGABRT")
        let first = try #require(report.stack?.first)
        #expect(first.contains("crashguard_test_throw_runtime_error"), "\(report.stack ?? [])")
        #expect(report.context?["image.0"] != nil)
    }

    @Test(
        "an uncaught NSRangeException on GNUstep arrives as one exception report, the thrower its first app frame",
        .enabled(if: ObjCExceptionDemo.path != nil, "needs scripts/objc-test's GNUstep build (CRASHGUARD_OBJC_DEMO_LIBRARY)"))
    func uncaughtObjectiveCException() async throws {
        let directory = CrashChild.prepare("objc-exception")
        await #expect(processExitsWith: .signal(SIGABRT)) {
            guard let demo = ObjCExceptionDemo.load() else { exit(97) }
            CrashChild.run("objc-exception") {
                // The GNUstep build's handler, handing exceptions to the SDK's crash record.
                guard demo.install(CrashCapture.objcExceptionSink) == 1 else { exit(96) }
                _ = demo.throwRange()
            }
        }
        // The next start queues exactly one report for it, through the reporter.
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        var config = reporterTestConfiguration(directory: directory, transport: transport)
        config.captureCrashes = true
        let reporter = try CrashGuard.start(config, clock: SystemReporterClock(), backoff: Backoff())
        await CrashCapture.waitForPrevious(timeout: .seconds(10))
        #expect(await reporter.flush(timeout: .seconds(10)))
        await CrashGuard.stop()
        let reports = transport.reports
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.kind == .exception)
        #expect(report.fatal == true)
        #expect(report.reason == "NSRangeException: Index 7 is out of range 3 (in 'objectAtIndex:')")
        #expect(report.context?["exception.runtime"] == "objc")
        let firstAppFrame = report.stack?.first { line in
            !["libgnustep-base", "libobjc", "libc.so", "libgcc_s", "libffi"].contains { line.contains($0) }
        }
        #expect(firstAppFrame?.contains("crashguard_objc_demo_uncaught_range") == true, "\(report.stack ?? [])")
        #expect(report.context?.values.contains { $0.hasSuffix("libCrashGuardObjCDemo.so") } == true)
    }
    #endif
}

/// The GNUstep build of the Objective-C target with its demo entries
/// (`scripts/objc-test build`), loaded with dlopen.
struct ObjCExceptionDemo {
    typealias Install = @convention(c) (crashguard_objc_exception_sink?) -> Int32
    typealias Throw = @convention(c) () -> Int32

    let install: Install
    let throwRange: Throw

    static var path: String? {
        guard let path = ProcessInfo.processInfo.environment["CRASHGUARD_OBJC_DEMO_LIBRARY"], !path.isEmpty else { return nil }
        return path
    }

    static func load() -> ObjCExceptionDemo? {
        guard let path, let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL),
            let install = dlsym(handle, "crashguard_objc_install_exception_handler"),
            let throwRange = dlsym(handle, "crashguard_objc_demo_uncaught_range")
        else { return nil }
        return ObjCExceptionDemo(
            install: unsafeBitCast(install, to: Install.self), throwRange: unsafeBitCast(throwRange, to: Throw.self))
    }
}
