import ArgumentParser

/// The options of the generated traffic (``Traffic``) that `load`, `pipeline` and `scrub` share,
/// declared once so that the three name the same bodies with the same flags.
///
/// The seed has no default here: `pipeline` and `scrub` make the same bodies at every run
/// (seed 1) so that builds compare, while `load` seeds from the clock so that each run sends
/// new reports (the same seed makes the same report ids: duplicates on a second run).
struct TrafficOptions: ParsableArguments {
    @Option(help: "Reports per body, 1 to 1000.") var batch = 100
    @Option(help: "Distinct crash signatures.") var signatures = 1000
    @Option(help: "Seed of the generated traffic: the same seed makes the same bodies (default: 1; load: from the clock).")
    var seed: UInt64?

    /// The seed of a figure that builds compare: the given one, else 1.
    var repeatableSeed: UInt64 { seed ?? 1 }
}

/// The options of the one-thread CPU runs, `pipeline` and `scrub`: how many bodies of the traffic
/// are made before the clock starts, and how long each figure is measured. `load` does not take
/// this group: its `--seconds` is the wall time to send for, and `--distinct-bodies` its
/// bodies, made only when given.
struct CPURunOptions: ParsableArguments {
    @Option(help: "Distinct bodies (cycled through).") var bodies = 50
    @Option(help: "Seconds to measure each figure.") var seconds: Double = 3

    /// The bodies of `traffic` the run cycles through, seeded repeatably so that builds compare.
    func bodies(of traffic: TrafficOptions) async throws -> [Traffic.Body] {
        try await Traffic(signatures: traffic.signatures, seed: traffic.repeatableSeed).bodies(
            requests: max(1, bodies), batch: max(1, traffic.batch))
    }
}
