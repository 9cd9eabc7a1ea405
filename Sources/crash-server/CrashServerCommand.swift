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
        subcommands: [Serve.self, Migrate.self, ProjectCommand.self, Top.self, DebugFilesCommand.self],
        defaultSubcommand: Serve.self
    )
}

/// Flags shared by every subcommand. Each overrides its environment variable, which
/// overrides the default (see `ServerConfiguration`).
struct CommonOptions: ParsableArguments {
    @Option(help: "PostgreSQL URL (env DATABASE_URL).")
    var databaseURL: String?

    @Option(help: "trace, debug, info, notice, warning, error, critical (env CRASHGUARD_LOG_LEVEL).")
    var logLevel: String?

    @Option(help: "URL clients reach the server at: the base of Sentry DSNs and alert links (env CRASHGUARD_PUBLIC_URL).")
    var publicURL: String?

    func configuration() throws -> ServerConfiguration {
        var config = try ServerConfiguration(environment: ProcessInfo.processInfo.environment)
        if let databaseURL { config.databaseURL = databaseURL }
        if let publicURL { config.publicURL = publicURL }
        guard SentryDSN.isValidPublicURL(config.publicURL) else {
            throw ValidationError("--public-url: '\(config.publicURL)' is not an http(s) URL with a host")
        }
        if let logLevel {
            guard let level = Logger.Level(rawValue: logLevel) else {
                throw ValidationError("--log-level: unknown level '\(logLevel)'")
            }
            config.logLevel = level
        }
        return config
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply the schema and serve HTTP (the default).")

    @OptionGroup var common: CommonOptions
    @Option(help: "PostgreSQL URL of a hot standby for queries and dashboard reads (env DATABASE_READ_URL).")
    var databaseReadURL: String?
    @Option(help: "Address to bind (env CRASHGUARD_HOST).") var host: String?
    @Option(help: "Port to bind (env CRASHGUARD_PORT).") var port: Int?
    @Option(help: "Largest compressed body in bytes (env CRASHGUARD_MAX_BODY_BYTES).") var maxBodyBytes: Int?
    @Option(help: "Largest decompressed body in bytes (env CRASHGUARD_MAX_DECOMPRESSED_BYTES).") var maxDecompressedBytes: Int?
    @Option(help: "Ingest requests per second per project, 0 = off (env CRASHGUARD_RATE_LIMIT).") var rateLimit: Double?
    @Option(help: "Ingest burst per project (env CRASHGUARD_RATE_BURST).") var rateBurst: Double?
    @Option(help: "Request body bytes in flight across uploads; no request or project holds more than half (env CRASHGUARD_MAX_INFLIGHT_BODY_BYTES).")
    var maxInflightBodyBytes: Int?
    @Option(help: "Most reports waiting for a commit before 503 (env CRASHGUARD_MAX_QUEUED_REPORTS).") var maxQueuedReports: Int?
    @Option(help: "Most reports in one group-commit transaction (env CRASHGUARD_MAX_BATCH_REPORTS).") var maxBatchReports: Int?
    @Option(help: "Most estimated report bytes in one group-commit transaction (env CRASHGUARD_MAX_BATCH_BYTES).") var maxBatchBytes: Int?
    @Option(help: "Group-commit transactions in flight at once, for single-group requests (env CRASHGUARD_INGEST_LANES).") var ingestLanes: Int?
    @Option(help: "Days of raw reports kept (env CRASHGUARD_RETENTION_DAYS).") var retentionDays: Int?
    @Option(help: "Database connections (env CRASHGUARD_DB_POOL_SIZE).") var dbPoolSize: Int?
    @Option(help: "Client connections served at once; more get 503 (env CRASHGUARD_MAX_CONNECTIONS).") var maxConnections: Int?
    @Option(help: "Share of the concurrent requests uploads may hold, 0 to 1; the rest is for queries (env CRASHGUARD_INGEST_SHARE).")
    var ingestShare: Double?

    func run() async throws {
        var config = try common.configuration()
        if let databaseReadURL { config.databaseReadURL = databaseReadURL }
        if let host { config.host = host }
        if let port { config.port = port }
        if let maxBodyBytes { config.maxBodyBytes = maxBodyBytes }
        if let maxDecompressedBytes { config.maxDecompressedBytes = maxDecompressedBytes }
        if let rateLimit { config.rateLimit = rateLimit }
        if let rateBurst { config.rateBurst = rateBurst }
        if let maxQueuedReports { config.maxQueuedReports = maxQueuedReports }
        if let maxBatchReports { config.maxBatchReports = maxBatchReports }
        if let maxBatchBytes { config.maxBatchBytes = maxBatchBytes }
        if let ingestLanes { config.ingestLanes = ingestLanes }
        if let maxInflightBodyBytes { config.maxInflightBodyBytes = maxInflightBodyBytes }
        if let retentionDays { config.retentionDays = retentionDays }
        if let dbPoolSize { config.databasePoolSize = dbPoolSize }
        if let maxConnections { config.maxConnections = maxConnections }
        if let ingestShare { config.ingestShare = ingestShare }
        try config.validate()
        MallocTuning.apply()
        let app = try await buildApplication(configuration: config, logger: makeLogger(config))
        try await app.runService()
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply schema.sql (idempotent, forward-only).")

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let config = try common.configuration()
        let logger = makeLogger(config)
        try await withDatabase(config, logger: logger) { db in
            try await db.migrate()
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
                try await db.migrate()
                return try await db.createProject(slug: name, grouping: grouping).json(publicURL: config.publicURL)
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
                try await db.migrate()
                return try await db.listProjectsJSON(publicURL: config.publicURL)
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
                try await db.migrate()
                return try await db.rotateKeys(slug: name, keys).json(publicURL: config.publicURL)
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
        table.filters = ["version": version, "os": os, "kind": kind, "status": status].compactMapValues { $0 }
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
