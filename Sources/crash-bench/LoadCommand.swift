import ArgumentParser
import AsyncHTTPClient
import CrashWire
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO
import Synchronization

/// `crash-bench load`: ingest load against a running server, then verification.
///
/// Every body is generated and gzip'd before the clock starts. Closed loop: `connections`
/// workers each send their next body as soon as the previous one is answered; with
/// `--rate`, requests are started on a fixed schedule instead (latency measured from the
/// scheduled start, so a stalled server is not hidden). The run ends when every body is
/// sent or `--seconds` pass. A request without an answer is resent (the ids make that
/// safe); 429 and 503 are counted and not resent.
///
/// `--limits` sends the largest valid bodies instead (1000 reports at the field limits, near
/// both body caps; `Traffic+largest.swift`), and `--distinct-bodies N` makes only N bodies
/// and sends them in turn, as clients resend a refused body: reports of a body sent again
/// count as duplicates.
///
/// Verification (`--database-url`, and the query API with `--read-token`): the project's
/// stored reports equal the acknowledged `accepted` sum, its groups equal the distinct
/// signatures among acknowledged reports, and group counts and rollups add up.
struct LoadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Ingest load generator: reports/s, latency, status counts; verifies what was stored."
    )

    @Option(help: "Server base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "The project's ingest key (or --create-project).") var key: String?
    @Option(help: "The project's slug (for verification).") var project: String?
    @Option(help: "The project's read token: also verify through the query API.") var readToken: String?
    @Option(help: "Create a fresh project with this crash-server binary (needs --database-url).") var createProject: String?
    @Option(help: "PostgreSQL URL: verify stored counts in the database.") var databaseURL: String?
    @Option(help: "Reports to send in all (rounded up to whole batches).") var reports = 10_000
    @OptionGroup var traffic: TrafficOptions
    @Option(help: "Concurrent connections (closed loop).") var connections = 8
    @Option(help: "Requests per second to start (0 = closed loop).") var rate: Double = 0
    @Option(help: "Stop sending after this many seconds.") var seconds: Double = 30
    @Option(help: "Share of reports that go to the hottest signature.") var hottest = 0.15
    @Option(help: "Server process id: sample its RSS and CPU during the run.") var serverPid: Int32?
    @Option(help: "PostgreSQL postmaster pid: sample the CPU of it and its backends.") var postgresPid: Int32?
    @Option(help: "Client event-loop threads.") var threads = 1
    @Option(help: "Label of this run in the ROW line.") var label: String?
    @Flag(help: "Skip verification.") var noVerify = false
    @Flag(help: "The largest valid bodies: --batch reports at the field limits, near both body caps (1000 for the default caps).")
    var limits = false
    @Option(help: "Make only this many bodies and send them in turn (reports sent again are duplicates).")
    var distinctBodies: Int?
    @Option(help: "The server's compressed body limit (for --limits).") var maxBodyBytes = WireProtocol.defaultMaxCompressedBytes
    @Option(help: "The server's decompressed body limit (for --limits).")
    var maxDecompressedBytes = WireProtocol.defaultMaxDecompressedBytes
    var batch: Int { traffic.batch }
    var signatures: Int { traffic.signatures }
    var seed: UInt64? { traffic.seed }

    func validate() throws {
        guard (1...WireProtocol.maxReportsPerBatch).contains(batch) else { throw ValidationError("--batch: 1 to 1000") }
        guard connections >= 1, reports >= 1, seconds > 0 else { throw ValidationError("counts must be positive") }
        if key == nil && createProject == nil { throw ValidationError("give --key or --create-project") }
        if createProject != nil && databaseURL == nil { throw ValidationError("--create-project needs --database-url") }
        if limits && maxDecompressedBytes / batch < Traffic.largestReportBytes {
            throw ValidationError("--limits: a report at the field limits takes about 16 KB: lower --batch or raise --max-decompressed-bytes")
        }
        if let distinctBodies, distinctBodies < 1 { throw ValidationError("--distinct-bodies: at least 1") }
    }

    func run() async throws {
        var key = key
        var project = project
        var readToken = readToken
        if let binary = createProject {
            let name = project ?? "bench-\(UInt32.random(in: 0...UInt32.max))"
            let keys = try Bench.createProject(serverBinary: binary, databaseURL: databaseURL!, name: name)
            key = keys.ingestKey
            readToken = readToken ?? keys.readToken
            project = name
        }
        let requests = (reports + batch - 1) / batch
        let seed = seed ?? UInt64(Date().timeIntervalSince1970 * 1000)
        let traffic = Traffic(signatures: signatures, hottest: hottest, seed: seed)
        let generationStart = ContinuousClock.now
        let made = min(requests, distinctBodies ?? requests)
        let bodies =
            limits
            ? try traffic.largestBodies(count: made, reports: batch, maxCompressed: maxBodyBytes, maxDecompressed: maxDecompressedBytes)
            : try await traffic.bodies(requests: made, batch: batch)
        let compressed = bodies.reduce(0) { $0 + $1.gzip.count }
        let raw = bodies.reduce(0) { $0 + $1.rawBytes }
        print(
            String(
                format: "generated %d requests x %d reports in %.1f s: %.0f B JSON, %.0f B gzip per request (%.1fx); %d signatures, hottest %.0f%%",
                made, batch, Bench.seconds(ContinuousClock.now - generationStart), Double(raw) / Double(made),
                Double(compressed) / Double(made), Double(raw) / Double(max(1, compressed)), signatures, hottest * 100))

        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, threads))
        var config = HTTPClient.Configuration()
        config.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        config.decompression = .disabled
        config.httpVersion = .http1Only
        let client = HTTPClient(eventLoopGroup: group, configuration: config)
        let buffers = bodies.map { ByteBuffer(bytes: $0.gzip) }
        let endpoint = url + WireProtocol.reportsPath
        let ingestKey = key!
        let run = RunState(count: requests)
        let sampler = ProcessSampler(pid: serverPid)
        let postgresStart = postgresPid.flatMap(ProcessSampler.treeCPUSeconds)
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + .milliseconds(Int64(seconds * 1000))
        let interval = rate > 0 ? 1 / rate : 0
        await withTaskGroup(of: Void.self) { tasks in
            for _ in 0..<connections {
                tasks.addTask {
                    while let index = run.next() {
                        var scheduled = clock.now
                        if interval > 0 {
                            scheduled = start + .nanoseconds(Int64(Double(index) * interval * 1e9))
                            if scheduled > clock.now { try? await Task.sleep(until: scheduled, clock: clock) }
                        }
                        if clock.now >= deadline {
                            run.stop()
                            return
                        }
                        var request = HTTPClientRequest(url: endpoint)
                        request.method = .POST
                        request.headers.add(name: WireProtocol.ingestKeyHeader, value: ingestKey)
                        request.headers.add(name: "Content-Type", value: "application/json")
                        request.headers.add(name: "Content-Encoding", value: "gzip")
                        request.body = .bytes(buffers[index % buffers.count])
                        var attempts = 0
                        while true {
                            attempts += 1
                            do {
                                let response = try await client.execute(request, timeout: .seconds(60))
                                let body = try await response.body.collect(upTo: 1 << 20)
                                let latency = Bench.seconds(clock.now - scheduled)
                                var outcome: IngestResponse?
                                if response.status.code == 202 {
                                    outcome = try? JSONDecoder().decode(IngestResponse.self, from: Data(body.readableBytesView))
                                }
                                let refusal = response.status.code == 202 ? nil : String(buffer: body).prefix(160)
                                run.record(
                                    index: index, status: Int(response.status.code), latency: latency, outcome: outcome,
                                    refusal: refusal.map { "\(response.status.code) \($0)" })
                                break
                            } catch {
                                if attempts >= 5 || clock.now >= deadline {
                                    run.record(index: index, status: 0, latency: Bench.seconds(clock.now - scheduled), outcome: nil)
                                    break
                                }
                            }
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
        var distinct = Set<String>()
        var hottestCount: [String: Int] = [:]
        for index in result.acknowledged {
            for s in bodies[index % bodies.count].signatures {
                distinct.insert(s)
                hottestCount[s, default: 0] += 1
            }
        }
        let latency = Bench.Latency(result.latencies)
        let storedPerSecond = Double(result.accepted) / elapsed
        print(
            String(
                format: "sent %d requests in %.2f s: %.0f requests/s, %.0f reports/s acknowledged (%d accepted, %d duplicates, %d rejected)",
                result.answered, elapsed, Double(result.answered) / elapsed, storedPerSecond, result.accepted,
                result.duplicates, result.rejected))
        print(String(format: "latency ms: p50 %.1f  p99 %.1f  max %.1f  (mean %.1f)", latency.p50, latency.p99, latency.max, latency.mean))
        print(
            "status: "
                + result.statuses.sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "no answer" : String($0.key)) x\($0.value)" }.joined(
                    separator: ", "))
        // Each refusal's answer as the server wrote it (the 503s' error says which limit).
        for (refusal, count) in result.refusals.sorted(by: { $0.value > $1.value }) { print("refused x\(count): \(refusal)") }
        let top = hottestCount.values.max() ?? 0
        print(
            String(
                format: "distinct signatures acknowledged: %d (hottest %.1f%% of reports)", distinct.count,
                Double(top) / Double(max(1, result.accepted + result.duplicates)) * 100))
        let stored = Double(max(1, result.accepted))
        if let usage {
            print(
                String(
                    format: "server: peak RSS %.1f MB, CPU %.0f%% of one core (%.0f µs per stored report); machine busy %.0f%%",
                    Double(usage.peakRSS) / 1_048_576, usage.cpuPercent, usage.cpuPercent / 100 * elapsed / stored * 1e6, usage.machineBusy))
        }
        if let postgresCPU {
            print(
                String(
                    format: "postgres: CPU %.0f%% of one core (%.0f µs per stored report)", postgresCPU / elapsed * 100, postgresCPU / stored * 1e6))
        }
        var verified = "skipped"
        if !noVerify {
            var failures: [String] = []
            if let databaseURL, let project {
                failures += try await verifyDatabase(url: databaseURL, project: project, accepted: result.accepted, groups: distinct.count)
                verified = "db"
            }
            if let readToken, let project {
                failures += try await verifyAPI(project: project, token: readToken, accepted: result.accepted, groups: distinct.count)
                verified += verified == "skipped" ? "" : "+"
                verified = verified.replacingOccurrences(of: "skipped", with: "") + "api"
            }
            if result.rejected > 0 { failures.append("\(result.rejected) reports rejected") }
            if result.duplicates > 0, made == requests { failures.append("\(result.duplicates) duplicates on unique ids") }
            // Refusals that ask for a retry are allowed (the byte budget's and the queue's 503);
            // anything else says the server or the generated traffic is wrong.
            let unexpected = result.statuses.filter { ![0, 202, 429, 503].contains($0.key) }
            for (status, count) in unexpected.sorted(by: { $0.key < $1.key }) { failures.append("\(count) answers \(status)") }
            if result.accepted == 0 { failures.append("nothing was acknowledged") }
            if !failures.isEmpty {
                for failure in failures { print("VERIFY FAILED: \(failure)") }
                throw ExitCode(1)
            }
            print("verified (\(verified)): stored == acknowledged (\(result.accepted)), groups == distinct signatures (\(distinct.count))")
        }
        let others = result.statuses.filter { $0.key != 202 }.map { "\($0.key == 0 ? "none" : String($0.key)):\($0.value)" }.sorted()
        func f0(_ value: Double?) -> String { value.map { String(format: "%.0f", $0) } ?? "-" }
        func f1(_ value: Double) -> String { String(format: "%.1f", value) }
        var cells: [String] = [label ?? "load b\(batch) c\(connections)", String(batch), String(connections)]
        cells.append(f0(Double(result.answered) / elapsed))
        cells.append(f0(storedPerSecond))
        cells += [f1(latency.p50), f1(latency.p99), f1(latency.max)]
        cells.append(others.isEmpty ? "202 only" : others.joined(separator: " "))
        cells.append(f0(usage.map { Double($0.peakRSS) / 1_048_576 }))
        cells.append(f0(usage?.cpuPercent))
        cells.append(f0(usage.map { $0.cpuPercent / 100 * elapsed / stored * 1e6 }))
        cells.append(f0(postgresCPU.map { $0 / elapsed * 100 }))
        cells.append(f0(postgresCPU.map { $0 / stored * 1e6 }))
        cells.append(f0(usage?.machineBusy))
        cells.append(verified)
        print("ROW|" + cells.joined(separator: "|"))
    }

    /// Counts in the database for the project against what was acknowledged. The hourly rollup's
    /// sum includes the reports still pending for the rollup aggregator: one statement sees each
    /// report either pending or folded, never both.
    func verifyDatabase(url: String, project: String, accepted: Int, groups: Int) async throws -> [String] {
        let connection = try await Bench.connect(url, logger: Bench.quietLogger)
        defer { Task { try? await connection.close() } }
        let rows = try await connection.query(
            """
            SELECT (SELECT count(*) FROM reports r WHERE r.project_id = p.id),
                   (SELECT count(*) FROM report_ids r WHERE r.project_id = p.id),
                   (SELECT count(*) FROM crash_groups g WHERE g.project_id = p.id),
                   (SELECT coalesce(sum(report_count), 0)::bigint FROM crash_groups g WHERE g.project_id = p.id),
                   (SELECT coalesce(sum(count), 0)::bigint FROM group_hourly h WHERE h.project_id = p.id)
                 + (SELECT coalesce(sum(reports), 0)::bigint FROM rollup_pending q WHERE q.project_id = p.id)
            FROM projects p WHERE p.slug = \(project)
            """, logger: Bench.quietLogger)
        var failures: [String] = []
        var found = false
        for try await (stored, ids, groupCount, groupSum, hourly) in rows.decode((Int64, Int64, Int64, Int64, Int64).self) {
            found = true
            print(
                "database: \(stored) reports, \(ids) ids, \(groupCount) groups, group counts sum \(groupSum),"
                    + " hourly rollup sum (with the pending) \(hourly)")
            if stored != accepted { failures.append("database has \(stored) reports, \(accepted) acknowledged") }
            if groupCount != groups { failures.append("database has \(groupCount) groups, \(groups) distinct signatures sent") }
            if groupSum != stored { failures.append("group counts sum to \(groupSum), \(stored) reports stored") }
            if hourly != stored { failures.append("hourly rollup sums to \(hourly), \(stored) reports stored") }
            if ids != stored { failures.append("\(ids) ids in the ledger, \(stored) reports stored") }
        }
        if !found { failures.append("project \(project) not found") }
        return failures
    }

    /// The same through the query API: every group over the last 31 days, paginated.
    func verifyAPI(project: String, token: String, accepted: Int, groups: Int) async throws -> [String] {
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        defer { Task { try? await client.shutdown() } }
        let from = RFC3339.format(Date().addingTimeInterval(-31 * 86_400))
        let to = RFC3339.format(Date().addingTimeInterval(86_400))
        var cursor: String?
        var total = 0
        var count = 0
        repeat {
            var components = URLComponents(string: url + "/v1/projects/\(project)/crashes")!
            components.queryItems = [.init(name: "from", value: from), .init(name: "to", value: to), .init(name: "limit", value: "200")]
            if let cursor { components.queryItems!.append(.init(name: "cursor", value: cursor)) }
            var request = HTTPClientRequest(url: components.url!.absoluteString)
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await client.execute(request, timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 16 << 20)
            guard response.status.code == 200,
                let object = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
                let list = object["groups"] as? [[String: Any]]
            else {
                return ["query API answered \(response.status.code): \(String(buffer: body).prefix(200))"]
            }
            for group in list { total += (group["count"] as? Int) ?? 0 }
            count += list.count
            cursor = object["nextCursor"] as? String
        } while cursor != nil
        print("query API: \(count) groups, counts sum \(total)")
        var failures: [String] = []
        if total != accepted { failures.append("query API counts \(total) reports, \(accepted) acknowledged") }
        if count != groups { failures.append("query API lists \(count) groups, \(groups) distinct signatures sent") }
        return failures
    }
}

/// The shared state of one run: the next body to send and what came back.
final class RunState: Sendable {
    struct Snapshot {
        var latencies: [Double] = []
        var statuses: [Int: Int] = [:]
        var accepted = 0
        var duplicates = 0
        var rejected = 0
        var answered = 0
        var acknowledged: [Int] = []
        /// The answers other than 202, by status and body.
        var refusals: [String: Int] = [:]
    }

    private let count: Int
    private let cursor = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let state = Mutex(Snapshot())

    init(count: Int) {
        self.count = count
        state.withLock { $0.latencies.reserveCapacity(count) }
    }

    func next() -> Int? {
        if stopped.load(ordering: .relaxed) { return nil }
        let index = cursor.wrappingAdd(1, ordering: .relaxed).oldValue
        return index < count ? index : nil
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    func record(index: Int, status: Int, latency: Double, outcome: IngestResponse?, refusal: String? = nil) {
        state.withLock { s in
            s.latencies.append(latency)
            if let refusal { s.refusals[refusal, default: 0] += 1 }
            s.statuses[status, default: 0] += 1
            s.answered += status == 0 ? 0 : 1
            if let outcome {
                s.accepted += outcome.accepted
                s.duplicates += outcome.duplicates
                s.rejected += outcome.rejected.count
                s.acknowledged.append(index)
            }
        }
    }

    func snapshot() -> Snapshot { state.withLock { $0 } }
}
