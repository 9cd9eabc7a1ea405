import Logging
import PostgresNIO
import ServiceLifecycle

/// The server's PostgreSQL: a pooled, non-blocking `PostgresClient` plus the queries
/// CrashGuard runs on it (each feature in its own `CrashDatabase+feature.swift`).
public struct CrashDatabase: Sendable {
    /// The connection pool; run it as a service.
    public let client: PostgresClient
    /// The hot standby for queries and dashboard reads (`DATABASE_READ_URL`), if any;
    /// see `withReadSnapshot` and docs/scaling.md.
    let reader: ReadReplica?
    let logger: Logger

    /// Creates the pool for `configuration.databaseURL`; sessions run in UTC, without JIT
    /// (its compile time, 15 ms and more, exceeded the run time of the query API's reads).
    public init(configuration: ServerConfiguration, logger: Logger) throws {
        var config = try PostgresClient.Configuration(url: configuration.databaseURL)
        config.options.maximumConnections = configuration.databasePoolSize
        config.options.minimumConnections = 0
        config.options.connectTimeout = .seconds(3)
        config.options.additionalStartupParameters = [("TimeZone", "UTC"), ("application_name", "crash-server"), ("jit", "off")]
        var backgroundLogger = logger
        backgroundLogger[metadataKey: "db"] = "postgres"
        client = PostgresClient(configuration: config, backgroundLogger: backgroundLogger)
        reader = try (configuration.databaseReadURL.isEmpty ? nil : configuration.databaseReadURL).map {
            try ReadReplica(
                url: $0, poolSize: configuration.databasePoolSize,
                maxLag: .milliseconds(Int64(configuration.readMaxLag * 1000)), logger: logger)
        }
        self.logger = logger
    }

    /// The pools and the standby's monitor, to run as services (the primary's first).
    public var services: [any Service] {
        guard let reader else { return [client] }
        return [client, reader.client, ReadReplicaMonitor(database: self, reader: reader)]
    }
}

/// Runs `body` with a database whose pool runs for exactly as long as `body` does:
/// for the command-line tools, which have no service group.
public func withDatabase<T: Sendable>(
    _ configuration: ServerConfiguration, logger: Logger, _ body: @Sendable (CrashDatabase) async throws -> T
) async throws -> T {
    let db = try CrashDatabase(configuration: configuration, logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await db.client.run() }
        defer { group.cancelAll() }
        // Let the pool start before the first lease (it would only warn, but loudly).
        try await Task.sleep(for: .milliseconds(20))
        return try await body(db)
    }
}

/// `true` for errors that mean the database could not be reached (as opposed to a
/// query the database refused): the ones that deserve a 503 and a retry.
func isConnectionError(_ error: any Error) -> Bool {
    if let transaction = error as? PostgresTransactionError {
        guard let inner = transaction.beginError ?? transaction.closureError ?? transaction.commitError else { return true }
        return isConnectionError(inner)
    }
    if error is DeadlineExceeded { return true }
    if let psql = error as? PSQLError {
        switch psql.code {
        case .server:
            // 08xxx connection exceptions, 57P01-03 shutdown / cannot connect now
            let state = psql.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        case .queryCancelled:
            return false
        default:
            return true
        }
    }
    return false
}

/// The SQLSTATE of a server error, looking inside transaction errors.
func sqlState(_ error: any Error) -> String? {
    if let transaction = error as? PostgresTransactionError {
        return (transaction.beginError ?? transaction.closureError ?? transaction.commitError).flatMap(sqlState)
    }
    return (error as? PSQLError)?.serverInfo?[.sqlState]
}
