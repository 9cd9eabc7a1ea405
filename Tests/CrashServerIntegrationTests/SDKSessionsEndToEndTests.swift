import CrashGuard
import CrashWire
import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The SDK's sessions against the real server (`POST /v1/sessions`, release health): the
/// updates it sends are accepted and counted as the contract says.
extension SDKEndToEndTests {
    @Test func sessionWithGuardErrorsCountsAsErroredRelease() async throws {
        let project = try await makeProject()
        let port = try freePort()
        let server = try await ServerProcess(
            port: port, arguments: ["--rate-limit", "0"], environment: ["DATABASE_URL": TestEnvironment.databaseURL])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-sessions-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = CrashGuard.Configuration(
            serverURL: URL(string: "http://127.0.0.1:\(port)")!, ingestKey: project.ingestKey,
            appID: "com.example.sessions", appVersion: "3.1.0", directory: directory, flushInterval: .milliseconds(200),
            captureCrashes: false, log: { _ in })
        configuration.environment = "staging"
        try CrashGuard.start(configuration)
        let numbers = [1, 2, 3]
        _ = numbers[guarded: 9]  // a guard's catch: the session's errors
        let closed = await CrashGuard.close(timeout: .seconds(30))
        #expect(closed)

        var request = URLRequest(
            url: URL(string: "http://127.0.0.1:\(port)/v1/projects/\(project.project)/releases?environment=staging")!)
        request.setValue("Bearer \(project.readToken)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(await server.terminate() == 0)
        let body = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let releases = try #require(body["releases"] as? [[String: Any]])
        let release = try #require(releases.first { $0["version"] as? String == "3.1.0" })
        // One session, exited with an error: errored, not crashed; one install.
        #expect(release["sessions"] as? Int == 1)
        #expect(release["erroredSessions"] as? Int == 1)
        #expect(release["crashedSessions"] as? Int == 0 && release["abnormalSessions"] as? Int == 0)
        #expect(release["users"] as? Int == 1)
        #expect(release["crashFreeSessions"] as? Double == 1)
    }
}
