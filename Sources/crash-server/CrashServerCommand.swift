import ArgumentParser
import CrashGrouping
import CrashServer
import Foundation
import Hummingbird
import Logging

/// `crash-server`: the CrashGuard ingest and query server, and its admin commands.
@main
struct CrashServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash-server",
        abstract: "CrashGuard crash-report server.",
        discussion: ServerConfiguration.flagHelp(for: .other),
        subcommands: [Serve.self, Migrate.self, ProjectCommand.self, UserCommand.self, Top.self, DebugFilesCommand.self, Settings.self],
        defaultSubcommand: Serve.self
    )

    /// Takes the settings' flags out of the arguments (they are looked up in
    /// `ServerConfiguration.settings`, not declared per command), then runs the command the
    /// rest names.
    static func main() async {
        // First, before another thread allocates: glibc never gives up an arena it made, so a
        // cap set once threads run leaves the arenas they already took (MallocTuning).
        MallocTuning.apply()
        let (settings, rest) = ServerConfiguration.splitSettingFlags(Array(CommandLine.arguments.dropFirst()))
        await CommonOptions.$settingFlags.withValue(settings) { await main(rest) }
    }
}

/// The configuration of every command: the settings' defaults, overridden by their
/// environment variables, overridden by the flags `CrashServerCommand.main()` took out.
struct CommonOptions: ParsableArguments {
    /// The settings' flags and their values.
    @TaskLocal static var settingFlags: [String] = []

    func configuration(for command: Setting.Command = .other) throws -> ServerConfiguration {
        let config = try ServerConfiguration(
            flags: Self.settingFlags, environment: ProcessInfo.processInfo.environment, command: command)
        try config.validate(for: command)
        return config
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply the schema and serve HTTP (the default).", discussion: ServerConfiguration.flagHelp(for: .serve))

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let config = try common.configuration(for: .serve)
        let app = try await buildApplication(configuration: config, logger: makeLogger(config))
        try await app.runService()
    }
}

/// Prints the settings table README.md carries (`SettingsTableTests` compares the two).
struct Settings: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every setting: its environment variable, default, flag and meaning (Markdown).")

    func run() {
        print(ServerConfiguration.markdownTable())
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply schema.sql (idempotent, forward-only).", discussion: ServerConfiguration.flagHelp(for: .other))

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let config = try common.configuration()
        let logger = makeLogger(config)
        try await withDatabase(config, logger: logger) { db in
            try await PostgresSchemaMaintenance(database: db).migrate()
        }
        logger.info("schema applied")
    }
}

struct ProjectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "project",
        abstract: "Create, list and rotate projects and their keys; choose their grouping version.",
        subcommands: [Create.self, List.self, Rotate.self, SetGrouping.self]
    )

    struct Create: AsyncParsableCommand {
        // The usage line by hand: the argument below is an array only to catch dashed words.
        static let configuration = CommandConfiguration(
            abstract: "Create a project; prints its keys once.",
            usage: "crash-server project create <name> [--grouping <grouping>] [<options>]")
        @OptionGroup var common: CommonOptions
        // Unrecognized dashed words land here too, so `create -x` is refused as a name
        // instead of being taken for a flag.
        @Argument(parsing: .allUnrecognized, help: ArgumentHelp("Project slug: [a-z0-9][a-z0-9-]{0,63}.", valueName: "name"))
        var names: [String] = []
        @Option(help: "Grouping version of the project's reports: v1 or v2 (see docs/grouping.md).")
        var grouping: GroupingVersion = .newProjectDefault

        var name: String { names[0] }

        func validate() throws {
            guard names.count == 1 else { throw ValidationError("give exactly one project name") }
            do { try ProjectError.validate(slug: names[0]) } catch let error as ProjectError { throw ValidationError(error.description) }
        }

        func run() async throws {
            let config = try common.configuration()
            let json = try await withDatabase(config, logger: makeLogger(config)) { db in
                try await PostgresSchemaMaintenance(database: db).migrate()
                return try await ProjectAdministration(database: db, logger: makeLogger(config)).create(slug: name, grouping: grouping)
                    .json(publicURL: config.publicURL)
            }
            print(json)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List projects (keys are never shown again).")
        @OptionGroup var common: CommonOptions

        func run() async throws {
            let config = try common.configuration()
            let json = try await withDatabase(config, logger: makeLogger(config)) { db in
                try await PostgresSchemaMaintenance(database: db).migrate()
                return try await PostgresProjectStore(database: db).listJSON(publicURL: config.publicURL)
            }
            print(json)
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "New keys for a project (both, or one); the old ones stop working, a kept one keeps working.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "Project slug.") var name: String
        @Flag(help: "Rotate only the read token (ends the project's dashboard sessions; apps keep reporting).")
        var readToken = false
        @Flag(help: "Rotate only the ingest key (the read token and dashboard sessions stay).")
        var ingestKey = false

        func run() async throws {
            let config = try common.configuration()
            // Neither flag, or both: both keys.
            let keys: KeyRotation = readToken == ingestKey ? .both : readToken ? .readToken : .ingestKey
            let json = try await withDatabase(config, logger: makeLogger(config)) { db in
                try await PostgresSchemaMaintenance(database: db).migrate()
                return try await ProjectAdministration(database: db, logger: makeLogger(config)).rotateKeys(slug: name, keys)
                    .json(publicURL: config.publicURL)
            }
            print(json)
        }
    }
}

struct Top: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a project's top crashes (the dashboard's table) in the terminal.")
    @OptionGroup var common: CommonOptions
    @Argument(help: "Project slug.") var name: String
    @Option(help: "24h, 7d or 30d.") var window = "7d"
    @Option(help: "Only reports of this app version.") var version: String?
    @Option(help: "Only reports of this OS.") var os: String?
    @Option(help: "Only groups of this kind.") var kind: String?
    @Option(help: "open, resolved, ignored or regressed (default: all but ignored).") var status: String?
    @Option(help: "Rows, 1 to 200.") var limit = 20

    func run() async throws {
        let config = try common.configuration()
        var table = TopCrashesTable()
        table.window = window
        table.limit = limit
        (table.version, table.os, table.kind, table.status) = (version, os, kind, status)
        let request = table
        let text = try await withDatabase(config, logger: makeLogger(config)) { db in
            try await request.render(database: db, project: name)
        }
        print(text)
    }
}

/// Logs to standard error, so command output on standard out stays machine-readable.
func makeLogger(_ config: ServerConfiguration) -> Logger {
    var logger = Logger(label: "crash-server") { LazyMetadataLogHandler(StreamLogHandler.standardError(label: $0)) }
    logger.logLevel = config.logLevel
    return logger
}
