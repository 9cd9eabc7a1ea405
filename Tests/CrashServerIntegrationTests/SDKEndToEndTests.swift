import CrashGuard
import CrashWire
import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The SDK's reporter against the real server and PostgreSQL: reports recorded while the
/// server is down wait on disk, and reach the database exactly once when it is back.
@Suite(.serialized) struct SDKEndToEndTests {
    @Test func reportsRecordedWhileServerIsDownDrainExactlyOnce() async throws {
        let project = try await makeProject()
        let port = try freePort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-e2e-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try CrashGuard.start(
            .init(
                serverURL: URL(string: "http://127.0.0.1:\(port)")!, ingestKey: project.ingestKey,
                appID: "com.example.e2e", appVersion: "2.1.0", directory: directory, batchSize: 25,
                flushInterval: .milliseconds(200), captureCrashes: false, log: { _ in }))

        // The server is not running: everything recorded now waits in the on-disk queue.
        for i in 0..<30 {
            #expect(CrashGuard.record("-[__NSArrayI objectAtIndex:]: index \(i + 3) beyond bounds [0 .. 2]", kind: .container))
        }
        for i in 0..<20 {
            #expect(CrashGuard.record("-[Student foo]: unrecognized selector sent to instance 0x7f87\(i)0e21bb0", kind: .unrecognizedSelector))
        }
        #expect(await CrashGuard.flush(timeout: .milliseconds(500)) == false)

        let server = try await ServerProcess(
            port: port, arguments: ["--rate-limit", "0"], environment: ["DATABASE_URL": TestEnvironment.databaseURL])
        let drained = await CrashGuard.flush(timeout: .seconds(45))
        await CrashGuard.stop()
        #expect(drained)
        #expect(await server.terminate() == 0)

        try await withTestDatabase { (db: CrashDatabase) async throws in
            let ids = try await db.storedReportIDs(slug: project.project)
            #expect(ids.count == 50)
            #expect(Set(ids).count == 50)
            let groups = try await db.groups(slug: project.project)
            #expect(groups.map(\.count) == [30, 20])
            #expect(groups.first?.title == "-[__NSArrayI objectAtIndex:]: index <n> beyond bounds [<n> .. <n>]")
        }
    }
}
