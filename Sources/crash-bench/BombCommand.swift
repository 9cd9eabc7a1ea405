import ArgumentParser
import AsyncHTTPClient
import CrashCompression
import CrashWire
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// `crash-bench bomb`: how fast and how cheaply the server refuses a hostile body.
///
/// - `--kind zeros` (the zip bomb): a gzip stream just under the compressed limit that
///   inflates to about `--inflated-mb` (1000) of JSON-looking filler (spaces after
///   `{"reports":[`): far over the decompressed limit, so 413.
/// - `--kind array` (the array bomb of issue 13): `{"reports":[1,1,1,...]}` inflating to
///   `--inflated-mb` (16: about 8.4 million numbers in 16 KB of gzip): 400 at the 1001st element.
/// - `--kind frames` (a wide array inside a report): one valid report whose `stack` holds
///   about 5.6 million empty frames in `--inflated-mb` (16) of JSON: 202 with the report
///   rejected (`stack: N frames, at most 256 allowed`); the body must still be read to its end.
///
/// Sends it `--requests` times (`--connections` at once) and reports the time to the refusal,
/// the server's peak RSS and its extra RSS over what it held before the first bomb, and how
/// long `/healthz` took meanwhile (asked every 20 ms on a connection of its own: what a
/// bystander waits while the bombs are read). Fails on any other answer.
struct BombCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bomb",
        abstract: "Zip-bomb (413) and array-bomb (400) refusal: time to the refusal and server RSS."
    )

    enum Kind: String, ExpressibleByArgument {
        case zeros, array, frames

        /// The answer each bomb must get.
        var expected: Int {
            switch self {
            case .zeros: 413
            case .array: 400
            case .frames: 202
            }
        }

        /// Also accepted: a zip bomb's connection may be closed once refused (0); bodies read
        /// to their end, several at once, may meet the byte budget's 503.
        var alsoAllowed: Set<Int> {
            switch self {
            case .zeros: [0]
            case .array: []
            case .frames: [503]
            }
        }
    }

    @Option(help: "Server base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Any valid ingest key (the body is read after authentication).") var key: String
    @Option(help: "zeros (zip bomb, 413), array ({\"reports\":[1,1,...]}, 400) or frames (a report with millions of empty frames, 202 rejecting it).")
    var kind = Kind.zeros
    @Option(help: "Decompressed size of the bomb, in MiB (default 1000 for zeros, 16 for array and frames).") var inflatedMb: Int?
    @Option(help: "Bombs to send.") var requests = 8
    @Option(help: "Bombs in flight at once.") var connections = 4
    @Option(help: "Server process id: sample its RSS.") var serverPid: Int32?

    func run() async throws {
        let (body, name) =
            switch kind {
            case .zeros: try zipBomb(mebibytes: inflatedMb ?? 1000)
            case .array: try arrayBomb(mebibytes: inflatedMb ?? 16)
            case .frames: try framesBomb(mebibytes: inflatedMb ?? 16)
            }
        let results = try await send(body)
        try report(results, name: name)
    }

    /// `{"reports":[1,1,...,1]}` of `mebibytes` MiB, one gzip member.
    func arrayBomb(mebibytes: Int) throws -> (body: [UInt8], name: String) {
        let count = (mebibytes << 20) / 2 - 8  // just under the size: refused by the scanner, not by the cap
        var json = Array("{\"reports\":[".utf8)
        json.reserveCapacity(mebibytes << 20)
        json += Self.list(of: "1", count: count)
        json += Array("]}".utf8)
        let body = try Deflater.compress(json, format: .gzip, level: 9)
        print("bomb: \(body.count) B gzip inflating to \(json.count) B: {\"reports\":[1,1,...]} with \(count) numbers")
        return (body, "array bomb (\(mebibytes) MiB, \(count / 1_000_000) M numbers, \(body.count / 1000) KB gzip)")
    }

    /// One report whose `stack` is `["","",...]`, the body just under `mebibytes` MiB.
    func framesBomb(mebibytes: Int) throws -> (body: [UInt8], name: String) {
        let head = Array(
            #"{"reports":[{"id":"\#(UUID().uuidString.lowercased())","timestamp":"\#(RFC3339.format(Date()))","kind":"custom","reason":"frames","app":{"id":"bench","version":"1"},"stack":["#
                .utf8)
        let tail = Array("]}]}".utf8)
        let count = ((mebibytes << 20) - head.count - tail.count - 8) / 3
        let json = head + Self.list(of: #""""#, count: count) + tail
        let body = try Deflater.compress(json, format: .gzip, level: 9)
        print("bomb: \(body.count) B gzip inflating to \(json.count) B: one report with \(count) empty frames")
        return (body, "frames bomb (\(mebibytes) MiB, \(count / 1_000_000) M empty frames, \(body.count / 1000) KB gzip)")
    }

    /// `count` copies of `element` separated by commas (`1,1,1`), built by doubling.
    static func list(of element: String, count: Int) -> ArraySlice<UInt8> {
        let unit = Array((element + ",").utf8)
        var items = unit
        while items.count < count * unit.count { items += items }
        return items.prefix(count * unit.count - 1)
    }

    /// A filler bomb just under the compressed limit.
    func zipBomb(mebibytes inflatedMb: Int) throws -> (body: [UInt8], name: String) {
        // Compress in 16 MiB slices of one deflate stream would need a streaming API; a
        // gzip member per slice, concatenated, is a valid gzip body too, and inflaters
        // that stop at the first member still see 16 MiB, which is already at the limit.
        let slice = [UInt8](repeating: 0x20, count: 16 << 20)
        let member = try Deflater.compress(Array("{\"reports\":[".utf8) + slice, format: .gzip, level: 9)
        let rest = try Deflater.compress(slice, format: .gzip, level: 9)
        var body = member
        var inflated = 16
        while inflated + 16 <= inflatedMb, body.count + rest.count < WireProtocol.defaultMaxCompressedBytes {
            body += rest
            inflated += 16
        }
        print(
            "bomb: \(body.count) B gzip inflating to \(inflated) MiB (\(body.count == member.count ? 1 : (body.count - member.count) / rest.count + 1) gzip members)"
        )
        return (body, "zip bomb (\(inflated) MiB)")
    }

    /// Sends `body` `requests` times, `connections` at once, asking `/healthz` meanwhile.
    func send(_ body: [UInt8]) async throws -> Run {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var config = HTTPClient.Configuration()
        config.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        let client = HTTPClient(eventLoopGroup: group, configuration: config)
        let bystander = HTTPClient(eventLoopGroup: group)
        let buffer = ByteBuffer(bytes: body)
        let endpoint = url + WireProtocol.reportsPath
        let sampler = ProcessSampler(pid: serverPid)
        let probe = Task { [url] in await Self.probe(bystander, url: url + "/healthz") }
        let results = try await withThrowingTaskGroup(of: (Int, Double).self) { tasks in
            var out: [(Int, Double)] = []
            var started = 0
            func launch() {
                started += 1
                tasks.addTask { [key] in
                    var request = HTTPClientRequest(url: endpoint)
                    request.method = .POST
                    request.headers.add(name: WireProtocol.ingestKeyHeader, value: key)
                    request.headers.add(name: "Content-Type", value: "application/json")
                    request.headers.add(name: "Content-Encoding", value: "gzip")
                    request.body = .bytes(buffer)
                    let t0 = ContinuousClock.now
                    do {
                        let response = try await client.execute(request, timeout: .seconds(60))
                        _ = try await response.body.collect(upTo: 1 << 20)
                        return (Int(response.status.code), Bench.seconds(ContinuousClock.now - t0))
                    } catch {
                        // The server may close the connection once it has refused.
                        return (0, Bench.seconds(ContinuousClock.now - t0))
                    }
                }
            }
            for _ in 0..<min(connections, requests) { launch() }
            while let result = try await tasks.next() {
                out.append(result)
                if started < requests { launch() }
            }
            return out
        }
        probe.cancel()
        let health = await probe.value
        let usage = sampler?.finish()
        try? await client.shutdown()
        try? await bystander.shutdown()
        try? await group.shutdownGracefully()
        return Run(results: results, health: health, peakRSS: usage?.peakRSS, startRSS: sampler?.startRSS)
    }

    struct Run {
        /// Status (0: closed without an answer) and seconds of each bomb.
        var results: [(Int, Double)]
        /// Seconds of each `/healthz` answered while the bombs were in flight.
        var health: [Double]
        var peakRSS: Int?
        var startRSS: Int?
    }

    /// Asks `url` every 20 ms until cancelled; the seconds of each answer.
    static func probe(_ client: HTTPClient, url: String) async -> [Double] {
        var seconds: [Double] = []
        while !Task.isCancelled {
            let t0 = ContinuousClock.now
            if let response = try? await client.execute(HTTPClientRequest(url: url), timeout: .seconds(30)),
                (try? await response.body.collect(upTo: 1 << 16)) != nil
            {
                seconds.append(Bench.seconds(ContinuousClock.now - t0))
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return seconds
    }

    /// Prints the result line and its ROW; fails unless every bomb got the kind's answer (or
    /// one it allows beside it).
    func report(_ run: Run, name: String) throws {
        let latency = Bench.Latency(run.results.map(\.1))
        let health = Bench.Latency(run.health)
        let statuses = Dictionary(grouping: run.results, by: \.0).mapValues(\.count)
            .sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "closed" : String($0.key)) x\($0.value)" }.joined(separator: ", ")
        func mb(_ bytes: Int?) -> String { bytes.map { String(format: "%.0f", Double($0) / 1_048_576) } ?? "-" }
        let extra = run.peakRSS.flatMap { peak in run.startRSS.map { max(0, peak - $0) } }
        print(
            String(format: "bomb: refused in p50 %.1f ms, max %.1f ms; ", latency.p50, latency.max)
                + "status \(statuses); server peak RSS \(mb(run.peakRSS)) MB, \(mb(extra)) MB over its \(mb(run.startRSS)) MB before; "
                + String(format: "/healthz meanwhile p50 %.1f ms, max %.1f ms (%d asked)", health.p50, health.max, run.health.count))
        print(
            "ROW|\(name)|\(requests)|\(min(connections, requests))|" + String(format: "%.1f|%.1f", latency.p50, latency.max)
                + "|\(statuses)|\(mb(run.peakRSS))|\(mb(extra))|" + String(format: "%.1f|%.1f", health.p50, health.max))
        if run.results.contains(where: { $0.0 != kind.expected && !kind.alsoAllowed.contains($0.0) }) {
            print("bomb FAILED: every answer must be \(kind.expected)")
            throw ExitCode(1)
        }
    }
}
