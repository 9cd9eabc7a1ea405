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

    @OptionGroup var traffic: TrafficOptions
    @OptionGroup var cpu: CPURunOptions

    func run() async throws {
        let (batch, seed) = (traffic.batch, traffic.repeatableSeed)
        let made = try await cpu.bodies(of: traffic)
        let gzip = made.reduce(0) { $0 + $1.gzip.count } / made.count
        let json = made.reduce(0) { $0 + $1.rawBytes } / made.count
        print("inputs: \(made.count) bodies of \(batch) reports (seed \(seed)), \(json) B JSON, \(gzip) B gzip on average; one thread used")
        let now = Date()
        let bodiesPerSecond = try Bench.callsPerCPUSecond(made, seconds: cpu.seconds) { body in
            let read = try IngestBodyReader.read(body.gzip, contentEncoding: "gzip", now: now)
            guard read.accepted.count == read.count else {
                print("pipeline FAILED: \(read.count - read.accepted.count) of \(read.count) reports of a body rejected")
                throw ExitCode(1)
            }
            return read.count
        }
        let rate = bodiesPerSecond * Double(made[0].reports)
        print(
            String(
                format: "pipeline: %.0f reports/s per core (%.2f µs each): inflate, scan, read, validate, sign",
                rate, 1e6 / rate))
    }
}
