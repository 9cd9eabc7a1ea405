import AsyncHTTPClient
import CrashWire
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A private PostgreSQL cluster a test may stop and start (via `scripts/postgres`),
/// on its own port so the shared test database is never disturbed.
struct PrivateCluster {
    let port: Int

    private func run(_ arguments: [String]) async throws -> String {
        // posix_spawn and waitpid(WNOHANG) rather than Foundation's Process: its exit
        // monitoring was seen to miss a child's exit here (a zombie, and a wait forever).
        let script = TestEnvironment.repoRoot.appendingPathComponent("scripts/postgres").path
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-pg-\(UUID().uuidString)").path
        defer { unlink(outputPath) }
        var env = ProcessInfo.processInfo.environment
        env["CRASHGUARD_PG_PORT"] = String(port)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv = ([script] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, script, &actions, nil, argv, envp)
        guard spawned == 0 else { throw TestFailure("posix_spawn \(script): \(spawned)") }
        var status: Int32 = 0
        do {
            // A start runs initdb at most once; two minutes is far past any run seen.
            try await waitUntil("scripts/postgres \(arguments.joined(separator: " ")) to exit", within: .seconds(120)) {
                waitpid(pid, &status, WNOHANG) != 0
            }
        } catch {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            throw error
        }
        let exitCode = (status >> 8) & 0xFF
        guard status & 0x7F == 0, exitCode == 0 else {
            throw TestFailure("scripts/postgres \(arguments.joined(separator: " ")) exited with status \(status)")
        }
        let data = FileManager.default.contents(atPath: outputPath) ?? Data()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func start(_ databases: String...) async throws { _ = try await run(["start"] + databases) }
    func stop() async throws { _ = try await run(["stop"]) }
    func url(_ database: String) async throws -> String { try await run(["url", database]) }
}

/// The `crash-server` executable built next to the test bundle, run as a child process.
final class ServerProcess: Sendable {
    let process: Process
    private let output = Mutex("")
    let port: Int

    /// Starts `crash-server serve` on a free port and waits until `/healthz` answers.
    init(port: Int = 0, arguments: [String] = [], environment: [String: String]) async throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("crash-server")
        let process = Process()
        process.executableURL = binary
        process.arguments = ["serve", "--port", String(port), "--log-level", "info"] + arguments
        var env = ProcessInfo.processInfo.environment
        // Webhook delivery and spike detection only where the test turns them on, as in
        // TestEnvironment.configuration: a server's sender claims any due delivery of its
        // database, and would take the webhook tests' with its own timings and refusals.
        env["CRASHGUARD_WEBHOOK_CONCURRENCY"] = "0"
        env["CRASHGUARD_SPIKE_INTERVAL"] = "0"
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = pipe
        self.process = process
        let output = Mutex("")
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if !data.isEmpty { output.withLock { $0 += String(decoding: data, as: UTF8.self) } }
        }
        try process.run()
        var found: Int?
        for _ in 0..<300 {
            if let range = output.withLock({ $0.range(of: "listening on 127.0.0.1:") }) {
                let rest = output.withLock { String($0[range.upperBound...]) }
                found = Int(rest.prefix { $0.isNumber })
                if found != nil { break }
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        self.output.withLock { $0 = output.withLock { $0 } }
        guard let found else {
            process.terminate()
            throw TestFailure("crash-server did not start: \(output.withLock { $0 })")
        }
        self.port = found
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Sends SIGTERM and waits for the exit status (nil if it did not exit within `timeout`).
    func terminate(timeout: Duration = .seconds(60)) async -> Int32? {
        kill(process.processIdentifier, SIGTERM)
        guard let status = await exitStatus(within: timeout) else {
            process.terminate()
            return nil
        }
        return status
    }

    /// Waits for the exit status; nil if the process still runs after `timeout`.
    func exitStatus(within timeout: Duration = .seconds(60)) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        return process.isRunning ? nil : process.terminationStatus
    }
}

/// One HTTP POST of a gzip'd batch; returns status (0 when no answer) and body.
func post(_ client: HTTPClient, url: String, key: String, body: [UInt8]) async -> (status: Int, body: String) {
    var request = HTTPClientRequest(url: url + "/v1/reports")
    request.method = .POST
    request.headers.add(name: "X-Crash-Key", value: key)
    request.headers.add(name: "Content-Type", value: "application/json")
    request.headers.add(name: "Content-Encoding", value: "gzip")
    request.body = .bytes(ByteBuffer(bytes: gzip(body)))
    do {
        let response = try await client.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), String(buffer: bytes))
    } catch {
        return (0, "\(error)")
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw TestFailure("bind() failed") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Runs `crash-server arguments` to its exit; returns its status and combined output.
func crashServer(
    _ arguments: [String], database: String = "postgres://nobody@127.0.0.1:1/none"
) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("crash-server")
    process.arguments = arguments
    // By default no database is reachable: these runs must end before needing one.
    var env = ProcessInfo.processInfo.environment
    env["DATABASE_URL"] = database
    process.environment = env
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}
