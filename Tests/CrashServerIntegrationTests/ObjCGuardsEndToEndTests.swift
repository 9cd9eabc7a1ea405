import CrashGuard
import CrashGuardObjC
import CrashWire
import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The Objective-C runtime guards' reports reach the server through the SDK: the guards
/// built against GNUstep by `scripts/objc-test` (a shared library with a demo entry that
/// trips them the way app code would) are loaded into this process, installed with
/// ``ObjCRuntimeGuards/reportCallback``, and what they catch is uploaded by the reporter
/// to a real `crash-server` on PostgreSQL, where it is grouped by reason.
///
/// Runs when `CRASHGUARD_OBJC_DEMO_LIBRARY` names that library: the
/// `scripts/test.d/90-objc-guards` step builds it and runs this suite.
@Suite(.serialized, .enabled(if: ObjCDemoLibrary.path != nil, "needs scripts/objc-test's GNUstep build"))
struct ObjCGuardsEndToEndTests {
    @Test func reportsCaughtByTheObjectiveCGuardsAreGroupedByReason() async throws {
        let library = try #require(ObjCDemoLibrary.load())
        let project = try await makeProject()
        let port = try freePort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-objc-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(
            port: port, arguments: ["--rate-limit", "0"], environment: ["DATABASE_URL": TestEnvironment.databaseURL])
        try CrashGuard.start(
            .init(
                serverURL: URL(string: "http://127.0.0.1:\(port)")!, ingestKey: project.ingestKey,
                appID: "com.example.objc", appVersion: "3.0.0", directory: directory, batchSize: 25,
                flushInterval: .milliseconds(200), captureCrashes: false, log: { _ in }))

        let installed = library.install(
            ObjCRuntimeGuards.Families([.container, .unrecognizedSelector]).rawValue,
            ObjCRuntimeGuards.reportCallback)
        #expect(installed & ObjCRuntimeGuards.Families.container.rawValue != 0)
        // The demo's classes live in the library, not in the main executable: named by
        // prefix, as an app names its own.
        library.limitSelectorGuard("CGDemo")
        // Four out-of-bounds reads (indices 3...6) and three unrecognized selectors on three
        // objects: every call answered nil instead of raising.
        #expect(library.trip(4, 3) == 7)

        let drained = await CrashGuard.flush(timeout: .seconds(45))
        await CrashGuard.stop()
        #expect(drained)
        #expect(await server.terminate() == 0)

        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 7)
            let groups = try await db.groups(slug: project.project)
            #expect(groups.map(\.count) == [4, 3])
            #expect(groups.first?.title == "-[GSInlineArray objectAtIndex:]: index <n> beyond bounds [<n> .. <n>]")
            #expect(groups.last?.title.hasPrefix("-[CGDemoStudent enroll]: unrecognized selector sent to instance") == true)
        }
    }

    @Test func swiftFamiliesMatchTheCHeader() {
        #expect(ObjCRuntimeGuards.Families.container.rawValue == UInt32(CRASHGUARD_OBJC_CONTAINER))
        #expect(ObjCRuntimeGuards.Families.string.rawValue == UInt32(CRASHGUARD_OBJC_STRING))
        #expect(ObjCRuntimeGuards.Families.unrecognizedSelector.rawValue == UInt32(CRASHGUARD_OBJC_SELECTOR))
        #expect(ObjCRuntimeGuards.Families.kvo.rawValue == UInt32(CRASHGUARD_OBJC_KVO))
        #expect(ObjCRuntimeGuards.Families.notification.rawValue == UInt32(CRASHGUARD_OBJC_NOTIFICATION))
        #expect(ObjCRuntimeGuards.Families.timer.rawValue == UInt32(CRASHGUARD_OBJC_TIMER))
        #expect(ObjCRuntimeGuards.Families.zombie.rawValue == UInt32(CRASHGUARD_OBJC_ZOMBIE))
        #expect(ObjCRuntimeGuards.Families.null.rawValue == UInt32(CRASHGUARD_OBJC_NULL))
        #expect(ObjCRuntimeGuards.Families.kvc.rawValue == UInt32(CRASHGUARD_OBJC_KVC))
        #expect(ObjCRuntimeGuards.Families.all.rawValue == UInt32(CRASHGUARD_OBJC_ALL))
    }
}

/// `libCrashGuardObjCDemo.so` from `scripts/objc-test build`, loaded with dlopen.
struct ObjCDemoLibrary {
    typealias Install = @convention(c) (UInt32, crashguard_objc_report_fn?) -> UInt32
    typealias Trip = @convention(c) (Int32, Int32) -> Int32

    typealias SelectorScope =
        @convention(c) (
            UnsafePointer<UnsafePointer<CChar>?>?, Int, UnsafePointer<UnsafePointer<CChar>?>?, Int
        ) -> Void

    let install: Install
    let trip: Trip
    let selectorScope: SelectorScope

    /// The unrecognized-selector guard takes over for classes named with `prefix`.
    func limitSelectorGuard(_ prefix: String) {
        prefix.withCString { name in
            let prefixes: [UnsafePointer<CChar>?] = [name]
            prefixes.withUnsafeBufferPointer { selectorScope($0.baseAddress, 1, nil, 0) }
        }
    }

    static var path: String? {
        guard let path = ProcessInfo.processInfo.environment["CRASHGUARD_OBJC_DEMO_LIBRARY"], !path.isEmpty else { return nil }
        return path
    }

    static func load() -> ObjCDemoLibrary? {
        guard let path, let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL),
            let install = dlsym(handle, "crashguard_objc_install"),
            let trip = dlsym(handle, "crashguard_objc_demo_trip"),
            let selectorScope = dlsym(handle, "crashguard_objc_selector_scope")
        else { return nil }
        return ObjCDemoLibrary(
            install: unsafeBitCast(install, to: Install.self), trip: unsafeBitCast(trip, to: Trip.self),
            selectorScope: unsafeBitCast(selectorScope, to: SelectorScope.self))
    }
}
