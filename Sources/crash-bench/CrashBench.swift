import ArgumentParser

/// `crash-bench`: load generator and micro-benchmarks for CrashGuard.
@main
struct CrashBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash-bench",
        abstract: "Benchmarks for the CrashGuard server and grouping engine.",
        subcommands: [NormalizeCommand.self]
    )
}
