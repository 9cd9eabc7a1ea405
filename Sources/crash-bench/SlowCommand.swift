import ArgumentParser
import AsyncHTTPClient
import CrashWire
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// `crash-bench slow`: the query API while slow senders saturate ingest (issue 13).
///
/// A reader times top-50 (`GET /v1/projects/{project}/crashes?limit=50`, `--runs` calls on one
/// connection) on the idle server. Then `--senders` connections each send the head of a
/// `POST /v1/reports` and trickle its valid gzip body at `--bytes-per-second`, never sending
/// its last byte; a sender the server answers (503 when the upload slots are taken, 408 at
/// the read timeout) or disconnects connects again a second later, as `Retry-After: 1` says,
/// so the pressure stays. After `--settle` seconds one more ingest, `/healthz` and the
/// dashboard's sign-in page (`GET /`) are sent, then the reader times top-50 again (a phase
/// longer than the server's read timeout also sees the senders cut off and coming back).
///
/// Prints both latencies, what the senders got and a ROW line. Fails when a query, the health
/// check or the sign-in page answers anything but 200 and, with `--require-refusal`, when the
/// extra ingest was not refused with 503 (the senders did not fill the upload share).
struct SlowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "slow",
        abstract: "Slow senders while queries run: top-50 p50/p99 idle and with N connections trickling bodies."
    )

    @Option(help: "Server base URL (http, IPv4 or a host name).") var url = "http://127.0.0.1:8080"
    @Option(help: "An ingest key (the senders are authenticated uploads).") var key: String
    @Option(help: "Project slug of the queries.") var project: String
    @Option(help: "The project's read token.") var readToken: String
    @Option(help: "Slow connections.") var senders = 1000
    @Option(help: "Body bytes each sender sends per second.") var bytesPerSecond = 4
    @Option(help: "Timed top-50 calls, idle and under the senders.") var runs = 20
    @Option(help: "Warm-up calls (not timed).") var warmup = 2
    @Option(help: "Seconds the senders get to connect before the reader starts.") var settle: Double = 2
    @Option(help: "Server process id: sample its RSS.") var serverPid: Int32?
    @Flag(help: "Fail unless one more ingest is refused with 503 while the senders trickle.") var requireRefusal = false

    func validate() throws {
        guard senders >= 1, bytesPerSecond >= 1, runs >= 1 else { throw ValidationError("counts must be positive") }
        guard let components = URLComponents(string: url), components.scheme == "http", components.host != nil else {
            throw ValidationError("--url: an http URL")
        }
    }

    func run() async throws {
        let components = URLComponents(string: url)!
        let traffic = Traffic(signatures: 10, seed: UInt64(Date().timeIntervalSince1970))
        let body = try await traffic.bodies(requests: 1, batch: 1)[0].gzip
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        let top = url + "/v1/projects/\(project)/crashes?limit=50"
        var failures: [String] = []
        func timed(_ phase: String) async throws -> [Double] {
            var samples: [Double] = []
            for run in 0..<(warmup + runs) {
                let start = ContinuousClock.now
                let status = try await get(client, top)
                if status != 200 { failures.append("\(phase): top-50 answered \(status)") }
                if run >= warmup { samples.append(Bench.seconds(ContinuousClock.now - start)) }
            }
            return samples
        }

        let idle = Bench.Latency(try await timed("idle"))
        let sampler = ProcessSampler(pid: serverPid)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let slow = SlowSenders(
            loop: group.next(), host: components.host!, port: components.port ?? 80, key: key, body: body,
            bytesPerSecond: bytesPerSecond)
        slow.start(senders)
        try await Task.sleep(for: .milliseconds(Int64(settle * 1000)))
        let atStart = try await slow.snapshot()
        let extra = try await ingest(client, body: body)
        if requireRefusal, extra != 503 {
            failures.append("one more ingest answered \(extra), not 503: the senders did not fill the upload share")
        }
        var others: [String] = []
        for (name, path) in [("healthz", "/healthz"), ("sign-in page", "/")] {
            let status = try await get(client, url + path)
            others.append("\(name) \(status)")
            if status != 200 { failures.append("\(name) answered \(status)") }
        }
        let loaded = Bench.Latency(try await timed("under slow senders"))
        let atEnd = try await slow.snapshot()
        try await slow.stop()
        try? await group.shutdownGracefully()
        try? await client.shutdown()
        let peak = sampler?.finish().peakRSS

        let answers = atEnd.statuses.sorted { $0.key < $1.key }
            .map { "\($0.key == 0 ? "closed" : String($0.key)) x\($0.value)" }.joined(separator: ", ")
        print(
            "slow senders: \(senders) connections at \(bytesPerSecond) B/s; requests open \(atStart.holding) after \(settle) s, "
                + "\(atEnd.holding) at the end; answers to senders: \(answers.isEmpty ? "none" : answers); connect errors \(atEnd.connectErrors)")
        print(
            String(
                format: "top-50 idle: p50 %.1f ms, p99 %.1f ms; under slow senders: p50 %.1f ms, p99 %.1f ms", idle.p50, idle.p99, loaded.p50,
                loaded.p99))
        print("under slow senders: \(others.joined(separator: ", ")), one more ingest \(extra)")
        let refused = atEnd.statuses[503, default: 0]
        print(
            "ROW|slow senders|\(senders)|\(bytesPerSecond)|\(atStart.holding)|\(refused)|"
                + String(format: "%.1f|%.1f|%.1f|%.1f", idle.p50, idle.p99, loaded.p50, loaded.p99)
                + "|\(failures.isEmpty ? "200 only" : "FAILED")|\(extra)|\(peak.map { String($0 >> 20) } ?? "-")")
        if !failures.isEmpty {
            for failure in failures { print("slow FAILED: \(failure)") }
            throw ExitCode(1)
        }
    }

    private func get(_ client: HTTPClient, _ target: String) async throws -> UInt {
        var request = HTTPClientRequest(url: target)
        request.headers.add(name: "Authorization", value: "Bearer \(readToken)")
        let response = try await client.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 64 << 20)
        return response.status.code
    }

    private func ingest(_ client: HTTPClient, body: [UInt8]) async throws -> UInt {
        var request = HTTPClientRequest(url: url + WireProtocol.reportsPath)
        request.method = .POST
        request.headers.add(name: WireProtocol.ingestKeyHeader, value: key)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Content-Encoding", value: "gzip")
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 20)
        return response.status.code
    }
}

/// Connections that trickle an upload, all on one event loop (every field is touched only there).
final class SlowSenders: @unchecked Sendable {
    struct Snapshot: Sendable {
        /// Connections whose request is sent in part and not answered.
        var holding: Int
        /// Answers the senders got, by status (0: closed without one).
        var statuses: [Int: Int]
        var connectErrors: Int
    }

    private let loop: any EventLoop
    private let host: String
    private let port: Int
    private let head: [UInt8]
    private let body: [UInt8]
    private let interval: TimeAmount
    private var stopping = false
    private var channels: [ObjectIdentifier: any Channel] = [:]
    private var holding = 0
    private var statuses: [Int: Int] = [:]
    private var connectErrors = 0

    init(loop: any EventLoop, host: String, port: Int, key: String, body: [UInt8], bytesPerSecond: Int) {
        self.loop = loop
        self.host = host
        self.port = port
        self.body = body
        head = Array(
            ("POST \(WireProtocol.reportsPath) HTTP/1.1\r\nHost: \(host)\r\n\(WireProtocol.ingestKeyHeader): \(key)\r\n"
                + "Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: \(body.count)\r\n\r\n").utf8)
        interval = .nanoseconds(Int64(1e9 / Double(bytesPerSecond)))
    }

    func start(_ count: Int) {
        loop.execute {
            for _ in 0..<count { self.connect() }
        }
    }

    func snapshot() async throws -> Snapshot {
        try await loop.submit { Snapshot(holding: self.holding, statuses: self.statuses, connectErrors: self.connectErrors) }.get()
    }

    func stop() async throws {
        let open = try await loop.submit {
            self.stopping = true
            return Array(self.channels.values)
        }.get()
        for channel in open { try? await channel.close() }
    }

    private func connect() {
        guard !stopping else { return }
        let watcher = AnswerWatcher(owner: self)
        ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(watcher) }
            }
            .connect(host: host, port: port)
            .whenComplete { result in
                switch result {
                case .success(let channel): self.opened(channel, watcher: watcher)
                case .failure:
                    self.connectErrors += 1
                    self.again()
                }
            }
    }

    private func opened(_ channel: any Channel, watcher: AnswerWatcher) {
        channels[ObjectIdentifier(channel)] = channel
        holding += 1
        watcher.holding = true
        channel.writeAndFlush(ByteBuffer(bytes: head), promise: nil)
        loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { task in
            // Never the last byte: the request stays incomplete until the server acts.
            guard channel.isActive, watcher.sent < self.body.count - 1 else {
                task.cancel()
                return
            }
            channel.writeAndFlush(ByteBuffer(bytes: [self.body[watcher.sent]]), promise: nil)
            watcher.sent += 1
        }
    }

    fileprivate func answered(_ status: Int, watcher: AnswerWatcher) {
        statuses[status, default: 0] += 1
        if watcher.holding {
            watcher.holding = false
            holding -= 1
        }
    }

    fileprivate func closed(_ channel: any Channel, watcher: AnswerWatcher) {
        channels[ObjectIdentifier(channel)] = nil
        if watcher.holding {
            answered(0, watcher: watcher)
        }
        again()
    }

    private func again() {
        guard !stopping else { return }
        loop.scheduleTask(in: .seconds(1)) { self.connect() }
    }
}

/// Reads a sender's answer: the status of the first response head.
private final class AnswerWatcher: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    let owner: SlowSenders
    var holding = false
    /// Body bytes sent.
    var sent = 0
    private var received: [UInt8] = []

    init(owner: SlowSenders) { self.owner = owner }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard holding else { return }
        received += Array(buffer: unwrapInboundIn(data))
        guard let text = String(bytes: received, encoding: .utf8), text.contains("\r\n") else { return }
        let status = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
        owner.answered(status, watcher: self)
    }

    func channelInactive(context: ChannelHandlerContext) {
        owner.closed(context.channel, watcher: self)
        context.fireChannelInactive()
    }
}
