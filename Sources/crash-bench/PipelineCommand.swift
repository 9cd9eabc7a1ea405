import ArgumentParser
import CrashIngest
import Foundation

/// `crash-bench pipeline`: the server's own work per report, without HTTP or the database.
///
/// Bodies of `--batch` reports of the load generator's traffic (gzip, as the SDK sends them),
/// built before the clock starts, are inflated, scanned, read, validated and signed by
/// `IngestBodyReader` (CrashIngest, what `POST /v1/reports` runs) on one thread, and counted per
/// second of that thread's CPU. The server CPU per stored report that `crash-bench load` prints,
/// less this, is HTTP, the binds, the rollup rows and the rest of the server. Fails unless every
/// report is accepted.
struct PipelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipeline",
        abstract: "Ingest bodies read and signed per second on one core (no HTTP, no database)."
    )

    @Option(help: "Reports per body.") var batch = 100
    @Option(help: "Distinct bodies (cycled through).") var bodies = 50
    @Option(help: "Distinct crash signatures.") var signatures = 1000
    @Option(help: "Seconds to measure.") var seconds: Double = 3
    @Option(help: "Seed of the generated traffic: the same seed makes the same bodies.") var seed: UInt64 = 1

    func run() async throws {
        let made = try await Traffic(signatures: signatures, seed: seed).bodies(requests: max(1, bodies), batch: max(1, batch))
        let gzip = made.reduce(0) { $0 + $1.gzip.count } / made.count
        let json = made.reduce(0) { $0 + $1.rawBytes } / made.count
        print("inputs: \(made.count) bodies of \(batch) reports (seed \(seed)), \(json) B JSON, \(gzip) B gzip on average; one thread used")
        let now = Date()
        var reports = 0
        var accepted = 0
        let clock = ContinuousClock()
        let start = clock.now
        let cpuStart = NormalizeCommand.threadCPUSeconds()
        let deadline = start + .milliseconds(Int(seconds * 1000))
        repeat {
            for body in made {
                let read = try IngestBodyReader.read(body.gzip, contentEncoding: "gzip", now: now)
                reports += read.count
                accepted += read.accepted.count
            }
        } while clock.now < deadline
        let cpu = NormalizeCommand.threadCPUSeconds() - cpuStart
        let wall = Bench.seconds(clock.now - start)
        guard accepted == reports else {
            print("pipeline FAILED: \(reports - accepted) of \(reports) reports rejected")
            throw ExitCode(1)
        }
        print(
            String(
                format:
                    "pipeline: %.0f reports/s per core (%.2f µs each): inflate, scan, read, validate, sign; %d reports, wall %.2f s, thread CPU %.2f s",
                Double(reports) / max(cpu, 1e-9), cpu / Double(reports) * 1e6, reports, wall, cpu))
    }
}
