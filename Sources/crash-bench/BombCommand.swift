import ArgumentParser
import AsyncHTTPClient
import CrashCompression
import CrashWire
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// `crash-bench bomb`: how fast and how cheaply the server refuses a zip bomb.
///
/// The body is a gzip stream just under the compressed limit that inflates to about
/// `--inflated-mb` of JSON-looking filler (zeros after `{"reports":[`): far over the
/// decompressed limit. Sends it `--requests` times (`--connections` at once) and reports
/// the time to the 413 and the server's peak RSS meanwhile.
struct BombCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bomb",
        abstract: "Zip-bomb refusal: time to 413 and server RSS."
    )

    @Option(help: "Server base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Any valid ingest key (the body is read after authentication).") var key: String
    @Option(help: "Decompressed size of the bomb, in MiB.") var inflatedMb = 1000
    @Option(help: "Bombs to send.") var requests = 8
    @Option(help: "Bombs in flight at once.") var connections = 4
    @Option(help: "Server process id: sample its RSS.") var serverPid: Int32?

    func run() async throws {
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

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var config = HTTPClient.Configuration()
        config.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        let client = HTTPClient(eventLoopGroup: group, configuration: config)
        let buffer = ByteBuffer(bytes: body)
        let endpoint = url + WireProtocol.reportsPath
        let sampler = ProcessSampler(pid: serverPid)
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
        let usage = sampler?.finish()
        try? await client.shutdown()
        try? await group.shutdownGracefully()
        let latency = Bench.Latency(results.map(\.1))
        let statuses = Dictionary(grouping: results, by: \.0).mapValues(\.count)
            .sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "closed" : String($0.key)) x\($0.value)" }.joined(separator: ", ")
        let rss = usage.map { String(format: "%.0f", Double($0.peakRSS) / 1_048_576) } ?? "-"
        print(
            String(format: "bomb: refused in p50 %.1f ms, max %.1f ms; ", latency.p50, latency.max) + "status \(statuses); server peak RSS \(rss) MB")
        print("ROW|zip bomb (\(inflated) MiB)|" + String(format: "%.1f|%.1f", latency.p50, latency.max) + "|\(statuses)|\(rss)")
        if results.contains(where: { $0.0 != 413 && $0.0 != 0 }) { throw ExitCode(1) }
    }
}
