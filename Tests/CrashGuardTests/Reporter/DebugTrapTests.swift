import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension CrashGuardEntryTests {
    #if !os(Windows)
    @Test("debug mode: a guard records, puts the report on disk, then traps with the catch as the crash's message")
    func debugTraps() async throws {
        let directory = CrashChild.prepare("debug-trap")
        await #expect(processExitsWith: .signal(CrashChild.trapSignal)) {
            var config = CrashGuard.Configuration(
                serverURL: URL(string: "http://127.0.0.1:9")!, ingestKey: "ik_test",
                appID: CrashChild.app.id, appVersion: CrashChild.app.version, appBuild: CrashChild.app.build,
                device: DeviceInfo(os: "Linux", osVersion: "1", model: "m", id: CrashChild.deviceID),
                directory: CrashChild.directory("debug-trap"), flushInterval: .seconds(3600), log: { _ in })
            config.debugTraps = true
            do { try CrashGuard.start(config) } catch { exit(99) }
            let list = [1, 2, 3]
            _ = list[guarded: 5]
            exit(98)  // not trapped
        }
        // The guard's report was on disk before the trap...
        let queue = try DiskQueue.open(directory: directory.appendingPathComponent("queue"), maxBytes: 1 << 20)
        defer { queue.relinquish() }
        let reports = try queue.peek(limit: 10).compactMap { queue.read($0) }.map {
            try JSONDecoder.crashWire().decode(Report.self, from: $0)
        }
        #expect(reports.map(\.kind) == [.container])
        // ... and the trap is a crash whose reason is the catch.
        let crash = try CrashChild.report(directory)
        #expect(crash.reason.contains("CrashGuard debug trap after recording container: -[Array objectAtIndex:]: index 5 beyond bounds [0 .. 2]"))
    }
    #endif
}
