import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `crash-server project rotate NAME [--read-token | --ingest-key]` (hardening.md, "Rotating
/// one key"), run as the operator runs it, against a live server that has the ingest key
/// cached: the rotated key fails on the very next request, the kept one keeps working.
@Suite struct KeyRotationTests {
    @Test func rotatingOnlyTheReadTokenKeepsTheIngestKey() async throws {
        let project = try await makeProject()
        let app = try await buildApplication(configuration: TestEnvironment.configuration(), logger: TestEnvironment.logger)
        try await app.test(.live) { client in
            try await waitForKeyListener(client)
            try await expectIngest(client, project.ingestKey, .accepted)
            try await expectIngest(client, project.ingestKey, .accepted)  // now from the cache
            #expect(try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken).status == .ok)

            let printed = try await rotate(project.project, "--read-token")
            #expect(printed["project"] as? String == project.project)
            #expect(printed["ingestKey"] is NSNull, "the kept key is null: \(printed)")
            let token = try #require(printed["readToken"] as? String)
            #expect(token.hasPrefix("cgr_") && token != project.readToken)
            #expect((printed["sentryId"] as? NSNumber)?.int64Value == project.sentryId)
            #expect(printed["sentryDsn"] as? String == "http://<ingestKey>@127.0.0.1:8080/\(project.sentryId)")

            let old = try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken)
            #expect(old.status == .unauthorized, "the old read token fails on the very next request")
            #expect(try await client.query("/v1/projects/\(project.project)/crashes", token: token).status == .ok)
            try await expectIngest(client, project.ingestKey, .accepted)
            #expect(try await client.sentryEvent(project, key: project.ingestKey).status == .ok)
        }
    }

    @Test func rotatingOnlyTheIngestKeyKeepsTheReadToken() async throws {
        let project = try await makeProject()
        let app = try await buildApplication(configuration: TestEnvironment.configuration(), logger: TestEnvironment.logger)
        try await app.test(.live) { client in
            try await waitForKeyListener(client)
            try await expectIngest(client, project.ingestKey, .accepted)
            try await expectIngest(client, project.ingestKey, .accepted)
            #expect(try await keyLookups(client, "hit") >= 1, "the key was cached before the rotation")

            let printed = try await rotate(project.project, "--ingest-key")
            #expect(printed["readToken"] is NSNull, "the kept token is null: \(printed)")
            let key = try #require(printed["ingestKey"] as? String)
            #expect(key.hasPrefix("cgi_") && key != project.ingestKey)
            #expect(printed["sentryDsn"] as? String == "http://\(key)@127.0.0.1:8080/\(project.sentryId)")

            try await expectIngest(client, project.ingestKey, .unauthorized)
            #expect(try await client.sentryEvent(project, key: project.ingestKey).status == .forbidden)
            try await expectIngest(client, key, .accepted)
            #expect(try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken).status == .ok)
        }
    }

    @Test func rotatingWithoutAFlagReplacesBoth() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let printed = try await rotate(project.project)
            let key = try #require(printed["ingestKey"] as? String), token = try #require(printed["readToken"] as? String)
            #expect(Set(printed.keys) == ["project", "ingestKey", "readToken", "sentryId", "sentryDsn"])
            try await expectIngest(client, project.ingestKey, .unauthorized)
            #expect(try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken).status == .unauthorized)
            try await expectIngest(client, key, .accepted)
            #expect(try await client.query("/v1/projects/\(project.project)/crashes", token: token).status == .ok)
        }
        let missing = try await runCrashServer(["project", "rotate", "t-no-such-project", "--read-token"])
        #expect(missing.status != 0)
        #expect(missing.output.contains("no project 't-no-such-project'"), "\(missing.output)")
    }

    // MARK: - Helpers

    func expectIngest(
        _ client: any TestClientProtocol, _ key: String, _ status: HTTPResponse.Status, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let response = try await client.ingest(key: key, body: batchBody([reportJSON()]))
        #expect(response.status == status, sourceLocation: sourceLocation)
    }

    /// Runs `crash-server project rotate NAME flags...` on the test database and returns the
    /// JSON object it printed.
    func rotate(_ name: String, _ flags: String...) async throws -> [String: Any] {
        let run = try await runCrashServer(["project", "rotate", name] + flags)
        #expect(run.status == 0, "\(run.output)")
        let line = try #require(run.output.split(separator: "\n").first { $0.hasPrefix("{") }, "\(run.output)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    /// Runs the `crash-server` executable to its exit without blocking a thread of the
    /// concurrency pool (the live server in this process answers the rotation's cache
    /// confirmations meanwhile); stdout and stderr together.
    func runCrashServer(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("crash-server-\(UUID().uuidString).out")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let handle = try FileHandle(forWritingTo: output)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("crash-server")
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = TestEnvironment.databaseURL
        env["CRASHGUARD_PUBLIC_URL"] = "http://127.0.0.1:8080"
        process.environment = env
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do { try process.run() } catch {
                process.terminationHandler = nil
                continuation.resume(throwing: error)
            }
        }
        try handle.close()
        return (status, String(decoding: try Data(contentsOf: output), as: UTF8.self))
    }
}
