import ArgumentParser
import AsyncHTTPClient
import CrashCompression
import CrashWire
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO

/// `crash-bench sessions`: session updates through `POST /v1/sessions` (release health), then
/// verification against the database.
///
/// The traffic of app runs: each session gets two updates, `init`/`ok` at start and its end
/// (`exited`, 3 % `crashed`, 1 % `abnormal`, 2 % `errored`) in the next request, so half of a
/// batch starts sessions and half ends sessions another request started. Every body is made
/// and gzip'd before the clock starts; closed loop, `connections` workers. Verification: the
/// release's sessions and crashed counts in the rollups (hours plus the deltas not folded yet) equal what was acknowledged.
struct SessionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sessions", abstract: "Session updates through POST /v1/sessions, then verification.")

    @Option(help: "Server base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "The project's ingest key (or --create-project).") var key: String?
    @Option(help: "The project's slug (for verification).") var project: String?
    @Option(help: "Create a fresh project with this crash-server binary (needs --database-url).") var createProject: String?
    @Option(help: "PostgreSQL URL: verify the rollups.") var databaseURL: String?
    @Option(help: "Updates to send in all (rounded up to whole batches).") var updates = 400_000
    @Option(help: "Updates per request (even, 2 to 1000).") var batch = 100
    @Option(help: "Concurrent connections (closed loop).") var connections = 64
    @Option(help: "Stop sending after this many seconds.") var seconds: Double = 10
    @Option(help: "Distinct users (did).") var users = 50_000
    @Option(help: "Server process id: sample its RSS and CPU during the run.") var serverPid: Int32?
    @Option(help: "PostgreSQL postmaster pid: sample the CPU of it and its backends.") var postgresPid: Int32?
    @Option(help: "Label of this run in the ROW line.") var label: String?

    func validate() throws {
        guard (2...1000).contains(batch), batch % 2 == 0 else { throw ValidationError("--batch: an even number from 2 to 1000") }
    }

    func run() async throws {
        var key = key
        var project = project
        if let binary = createProject {
            let name = project ?? "bench-sessions-\(UInt32.random(in: 0...UInt32.max))"
            key = try Bench.createProject(serverBinary: binary, databaseURL: databaseURL!, name: name).ingestKey
            project = name
        }
        let requests = (updates + batch - 1) / batch
        let generationStart = ContinuousClock.now
        let bodies = try Self.bodies(requests: requests, batch: batch, users: users)
        print(
            String(
                format: "generated %d requests x %d updates in %.1f s: %.0f B gzip per request", requests, batch,
                Bench.seconds(ContinuousClock.now - generationStart),
                Double(bodies.reduce(0) { $0 + $1.count }) / Double(max(1, requests))))

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var config = HTTPClient.Configuration()
        config.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        config.decompression = .disabled
        config.httpVersion = .http1Only
        let client = HTTPClient(eventLoopGroup: group, configuration: config)
        let buffers = bodies.map { ByteBuffer(bytes: $0) }
        let endpoint = url + "/v1/sessions"
        let ingestKey = key!
        let run = RunState(count: requests)
        let sampler = ProcessSampler(pid: serverPid)
        let postgresStart = postgresPid.flatMap(ProcessSampler.treeCPUSeconds)
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + .milliseconds(Int64(seconds * 1000))
        await withTaskGroup(of: Void.self) { tasks in
            for _ in 0..<connections {
                tasks.addTask {
                    while let index = run.next() {
                        let sent = clock.now
                        if sent >= deadline {
                            run.stop()
                            return
                        }
                        var request = HTTPClientRequest(url: endpoint)
                        request.method = .POST
                        request.headers.add(name: WireProtocol.ingestKeyHeader, value: ingestKey)
                        request.headers.add(name: "Content-Type", value: "application/json")
                        request.headers.add(name: "Content-Encoding", value: "gzip")
                        request.body = .bytes(buffers[index])
                        do {
                            let response = try await client.execute(request, timeout: .seconds(60))
                            let body = try await response.body.collect(upTo: 1 << 20)
                            var outcome: IngestResponse?
                            if response.status.code == 202 {
                                outcome = try? JSONDecoder().decode(IngestResponse.self, from: Data(body.readableBytesView))
                            }
                            run.record(
                                index: index, status: Int(response.status.code), latency: Bench.seconds(clock.now - sent),
                                outcome: outcome)
                        } catch {
                            run.record(index: index, status: 0, latency: Bench.seconds(clock.now - sent), outcome: nil)
                        }
                    }
                }
            }
        }
        let elapsed = Bench.seconds(clock.now - start)
        let usage = sampler?.finish()
        let postgresCPU = postgresStart.flatMap { start in postgresPid.flatMap(ProcessSampler.treeCPUSeconds).map { $0 - start } }
        try? await client.shutdown()
        try? await group.shutdownGracefully()

        let result = run.snapshot()
        let latency = Bench.Latency(result.latencies)
        let acknowledged = result.accepted + result.duplicates
        print(
            String(
                format: "sent %d requests in %.2f s: %.0f requests/s, %.0f updates/s acknowledged (%d accepted, %d duplicates, %d rejected)",
                result.answered, elapsed, Double(result.answered) / elapsed, Double(acknowledged) / elapsed, result.accepted,
                result.duplicates, result.rejected))
        print(String(format: "latency ms: p50 %.1f  p99 %.1f  max %.1f", latency.p50, latency.p99, latency.max))
        print(
            "status: "
                + result.statuses.sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "no answer" : String($0.key)) x\($0.value)" }
                .joined(separator: ", "))
        if let usage {
            print(
                String(
                    format: "server: peak RSS %.1f MB, CPU %.0f%% of one core (%.1f µs per update); machine busy %.0f%%",
                    Double(usage.peakRSS) / 1_048_576, usage.cpuPercent,
                    usage.cpuPercent / 100 * elapsed / Double(max(1, acknowledged)) * 1e6, usage.machineBusy))
        }
        if let postgresCPU {
            print(
                String(
                    format: "postgres: CPU %.0f%% of one core (%.1f µs per update)", postgresCPU / elapsed * 100,
                    postgresCPU / Double(max(1, acknowledged)) * 1e6))
        }
        var failures: [String] = []
        if let databaseURL, let project {
            // Sessions started = distinct sessions of the acknowledged requests.
            var started = Set<Int>()
            var crashed = Set<Int>()
            for index in result.acknowledged {
                for (session, isCrash) in Self.sessions(request: index, of: requests, batch: batch) {
                    started.insert(session)
                    if isCrash { crashed.insert(session) }
                }
            }
            let connection = try await Bench.connect(databaseURL, logger: .init(label: "bench"))
            let totals = try await Bench.values(
                connection,
                """
                SELECT COALESCE(sum(h.started), 0)::bigint
                FROM (SELECT project_id, started FROM session_hours UNION ALL SELECT project_id, started FROM session_deltas) h
                JOIN projects p ON p.id = h.project_id WHERE p.slug = \(project)
                UNION ALL
                SELECT COALESCE(sum(h.crashed), 0)::bigint
                FROM (SELECT project_id, crashed FROM session_hours UNION ALL SELECT project_id, crashed FROM session_deltas) h
                JOIN projects p ON p.id = h.project_id WHERE p.slug = \(project)
                """, as: Int64.self)
            try? await connection.close()
            if totals.count == 2, totals[0] != Int64(started.count) {
                failures.append("rollups count \(totals[0]) sessions started, \(started.count) acknowledged")
            }
            if totals.count == 2, totals[1] != Int64(crashed.count) {
                failures.append("rollups count \(totals[1]) crashed, \(crashed.count) acknowledged")
            }
            if failures.isEmpty { print("verified (db): started == \(started.count), crashed == \(crashed.count)") }
        }
        if result.rejected > 0 { failures.append("\(result.rejected) updates rejected") }
        for (status, count) in result.statuses where ![0, 202, 429, 503].contains(status) {
            failures.append("\(count) answers \(status)")
        }
        for failure in failures { print("VERIFY FAILED: \(failure)") }
        let others = result.statuses.filter { $0.key != 202 }.map { "\($0.key == 0 ? "none" : String($0.key)):\($0.value)" }.sorted()
        let perUpdate = Double(max(1, acknowledged))
        func f0(_ value: Double?) -> String { value.map { String(format: "%.0f", $0) } ?? "-" }
        func f1(_ value: Double?) -> String { value.map { String(format: "%.1f", $0) } ?? "-" }
        let cells: [String] = [
            label ?? "sessions b\(batch) c\(connections)", String(batch), String(connections), f0(Double(result.answered) / elapsed),
            f0(Double(acknowledged) / elapsed), f1(latency.p50), f1(latency.p99), f1(latency.max),
            others.isEmpty ? "-" : others.joined(separator: " "), f0(usage.map { Double($0.peakRSS) / 1_048_576 }),
            f0(usage?.cpuPercent), f1(usage.map { $0.cpuPercent / 100 * elapsed / perUpdate * 1e6 }),
            f0(postgresCPU.map { $0 / elapsed * 100 }), f1(postgresCPU.map { $0 / perUpdate * 1e6 }), f0(usage?.machineBusy),
            failures.isEmpty ? (databaseURL == nil ? "skipped" : "db") : "FAILED",
        ]
        print("ROW|" + cells.joined(separator: "|"))
        if !failures.isEmpty { throw ExitCode(1) }
    }

    /// The sessions request `index` of `requests` updates, and whether each ends crashed: the
    /// first half of a batch starts sessions `index * half ..< (index + 1) * half`, the second
    /// half ends the previous request's (the first request starts sessions past all others').
    static func sessions(request index: Int, of requests: Int, batch: Int) -> [(session: Int, crashed: Bool)] {
        let half = batch / 2
        let started = (0..<half).map { (index * half + $0, false) }
        guard index > 0 else { return started + (0..<half).map { (requests * half + $0, false) } }
        return started + (0..<half).map { ((index - 1) * half + $0, ending((index - 1) * half + $0) == "crashed") }
    }

    static func ending(_ session: Int) -> String {
        switch session % 100 {
        case 0..<3: "crashed"
        case 3: "abnormal"
        case 4..<6: "errored"
        default: "exited"
        }
    }

    static func sid(_ session: Int) -> String { String(format: "5e55a0b0-0000-4000-8000-%012x", session) }

    static func bodies(requests: Int, batch: Int, users: Int) throws -> [[UInt8]] {
        let half = batch / 2
        let started = RFC3339.format(Date().addingTimeInterval(-60))
        let release = "com.example.bench@3.1.0"
        return try (0..<requests).map { index in
            var json = "{\"sessions\":["
            var first = true
            func add(_ text: String) {
                if !first { json += "," }
                first = false
                json += text
            }
            for i in 0..<half {
                let session = index * half + i
                add(
                    "{\"sid\":\"\(sid(session))\",\"did\":\"user-\(session % users)\",\"seq\":0,\"init\":true,"
                        + "\"started\":\"\(started)\",\"status\":\"ok\",\"attrs\":{\"release\":\"\(release)\"}}")
            }
            for i in 0..<half {
                if index > 0 {
                    let session = (index - 1) * half + i
                    let status = ending(session)
                    add(
                        "{\"sid\":\"\(sid(session))\",\"did\":\"user-\(session % users)\",\"seq\":1,\"started\":\"\(started)\","
                            + "\"status\":\"\(status)\",\"errors\":\(status == "errored" ? 1 : 0),\"duration\":12.5,"
                            + "\"attrs\":{\"release\":\"\(release)\"}}")
                } else {
                    let session = requests * half + i
                    add(
                        "{\"sid\":\"\(sid(session))\",\"did\":\"user-\(session % users)\",\"seq\":0,\"init\":true,"
                            + "\"started\":\"\(started)\",\"attrs\":{\"release\":\"\(release)\"}}")
                }
            }
            json += "]}"
            return try Deflater.compress(Array(json.utf8), format: .gzip)
        }
    }
}
