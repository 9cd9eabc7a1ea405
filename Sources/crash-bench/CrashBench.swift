import ArgumentParser

/// `crash-bench`: load generator and micro-benchmarks for CrashGuard.
@main
struct CrashBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash-bench",
        abstract: "Benchmarks for the CrashGuard server and grouping engine.",
        subcommands: [
            LoadCommand.self, SeedCommand.self, QueryCommand.self, BombCommand.self, SlowCommand.self, NormalizeCommand.self,
            GroupingCommand.self, PipelineCommand.self, SessionsCommand.self, ScrubCommand.self,
        ]
    )
}
