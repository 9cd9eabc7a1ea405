import ArgumentParser
import CrashCompression
import CrashGrouping
import CrashIngest
import CrashWire
import Foundation

/// `crash-bench scrub`: what the scrubber adds to the server's work per report (data-protection.md).
///
/// The bodies of `crash-bench pipeline` (the load generator's traffic, gzip) go through
/// `IngestBodyReader` (inflate, scan, read, validate, scrub, sign) on one thread three times:
/// without a scrubber, with the default rules (a project's settings as created), and with every
/// rule on (IP addresses, e-mail addresses, extra key words and `--patterns` RE2 patterns). Each
/// figure is per second of the thread's CPU; the difference to the first is the scrubber's cost
/// per report. A share of the reports (`--secrets`) carry a token, a password and a card number,
/// so the rules replace text as well as scan it.
struct ScrubCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scrub",
        abstract: "Ingest bodies read with and without the scrubber, per second on one core (no HTTP, no database)."
    )

    @OptionGroup var traffic: TrafficOptions
    @OptionGroup var cpu: CPURunOptions
    @Option(help: "Share of reports (0 to 1) whose reason and context hold secrets.") var secrets: Double = 0.1
    @Option(help: "Extra RE2 patterns of the 'every rule' figure (1 to 20).") var patterns = 5

    func run() async throws {
        guard (0...1).contains(secrets), (1...20).contains(patterns) else {
            throw ValidationError("--secrets is 0 to 1, --patterns 1 to 20")
        }
        let seed = traffic.repeatableSeed
        let made = try await cpu.bodies(of: traffic)
        let inputs = try made.enumerated().map { n, body in try Self.withSecrets(body.gzip, share: secrets, seed: seed &+ UInt64(n)) }
        let reports = made[0].reports
        let load = Bench.shell("cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || sysctl -n vm.loadavg")
        print("machine: \(Bench.shell("uname -m")), \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(load); one thread used")
        print("inputs: \(inputs.count) bodies of \(reports) reports (seed \(seed)), \(Int(secrets * 100))% with secrets")
        let sources = Array(
            [
                #"order-[0-9]{6,}"#, #"(?i)ssn[: ]*[0-9]{3}-[0-9]{2}-[0-9]{4}"#, #"internal\.example\.[a-z]+"#, #"(a|aa)+b"#, #"[A-Z]{20,}"#,
            ].prefix(patterns))
        let extra = (0..<max(0, patterns - 5)).map { #"customer-\#($0)-[0-9]+"# }
        let every = ReportScrubber(
            settings: ScrubSettings(scrubIPs: true, scrubEmails: true, sensitiveFields: ["pin", "iban"]),
            patterns: try ScrubPatterns(sources + extra))
        let now = Date()
        var baseline = 0.0
        for (label, scrubber) in [("no scrubber", nil), ("default rules", ReportScrubber()), ("every rule, \(patterns) patterns", every)] {
            let perBody = try Bench.callsPerCPUSecond(inputs, seconds: cpu.seconds) { body in
                let reader = try IngestBodyReader(
                    contentEncoding: "gzip", maxBodyBytes: .max, maxDecompressedBytes: WireProtocol.defaultMaxDecompressedBytes)
                try reader.feed(body)
                let read = try reader.finish(now: now, version: .newProjectDefault, scrubber: scrubber)
                guard read.accepted.count == read.count else {
                    print("scrub FAILED: \(read.count - read.accepted.count) of \(read.count) reports of a body rejected")
                    throw ExitCode(1)
                }
                return read.accepted.reduce(0) { $0 + ($1.scrubbed ? 1 : 0) }
            }
            let rate = perBody * Double(reports)
            if scrubber == nil { baseline = rate }
            let extraMicros = scrubber == nil ? 0 : 1e6 / rate - 1e6 / baseline
            print(
                String(
                    format: "%@ %9.0f reports/s per core  (%.2f µs each, scrubbing %+.2f µs)",
                    label.padding(toLength: 28, withPad: " ", startingAt: 0), rate, 1e6 / rate, extraMicros))
        }
    }

    /// The body (gzip JSON) with a `share` of its reports given secrets in their reason and context.
    static func withSecrets(_ gzip: [UInt8], share: Double, seed: UInt64) throws -> [UInt8] {
        guard share > 0 else { return gzip }
        let json = try Inflater.inflate(gzip, format: .gzip, maxOutputBytes: 64 << 20)
        guard var object = try JSONSerialization.jsonObject(with: Data(json)) as? [String: Any],
            var reports = object["reports"] as? [[String: Any]]
        else { throw ValidationError("generated body is not a reports object") }
        let every = max(1, Int((1 / share).rounded()))
        for i in reports.indices where (i + Int(seed % 7)) % every == 0 {
            reports[i]["reason"] = "\(reports[i]["reason"] as? String ?? "") GET /api?token=a1b2c3d4e5&page=2 card 4111 1111 1111 1111"
            var context = reports[i]["context"] as? [String: String] ?? [:]
            context["password"] = "hunter2"
            context["user"] = "ann@example.com from 10.1.2.3"
            reports[i]["context"] = context
        }
        object["reports"] = reports
        return try Deflater.compress(Array(JSONSerialization.data(withJSONObject: object)), format: .gzip)
    }
}
