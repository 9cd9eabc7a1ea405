import Logging
import PostgresNIO
import ServiceLifecycle

/// The server's PostgreSQL: its pooled, non-blocking `PostgresClient`s, the routing of reads
/// to the standby or the primary (``withReader(_:)``, ``withReadSnapshot(_:)``) and the flag
/// that says the schema is applied.
///
/// The queries live in one store per aggregate, each a protocol and a struct over these pools:
/// ``PostgresIngestStore``, ``PostgresQueryStore``, ``PostgresProjectStore``,
/// ``PostgresWebhookStore``, ``PostgresDebugFileStore``, ``PostgresSessionStore`` and
/// ``PostgresSchemaMaintenance`` (docs/server.md, "Storage").
public struct CrashDatabase: Sendable {
    /// The primary's pool for everything but ingest transactions and read snapshots: writes
    /// (triage, webhooks, projects), lookups, migrations and maintenance. Its sessions keep
    /// PostgreSQL's default timeouts, so a migration that builds an index is not cut short.
    public let client: PostgresClient
    /// The primary's pool of the read snapshots (``withReadSnapshot(_:)``: the query API, the
    /// dashboard, webhook payloads) when they do not go to the standby: its sessions start
    /// with ``QueryTimeouts``, so PostgreSQL ends any read statement at
    /// `CRASHGUARD_QUERY_TIMEOUT` and the connection goes back to the pool.
    let queryClient: PostgresClient
    /// The pool of the group-commit transaction alone (``PostgresIngestStore/store(_:gate:)``): its sessions start
    /// with the transaction's timeouts and plan cache mode (``IngestTimeouts``), so a commit
    /// does not spend a round trip setting them.
    let ingestClient: PostgresClient
    /// The hot standby for queries and dashboard reads (`DATABASE_READ_URL`), if any;
    /// see `withReadSnapshot` and docs/scaling.md.
    let reader: ReadReplica?
    let logger: Logger
    /// Most estimated bytes of reports one ingest statement binds (`maxBatchBytes`): a request
    /// over it is still one transaction, its reports written in several statements
    /// (``PostgresIngestStore/writeReports(_:_:regressed:_:)``).
    let maxStatementBytes: Int
    /// `CRASHGUARD_RETENTION_DAYS`: the retention of projects without their own, which every
    /// query clamps its window to (``PostgresQueryStore/Reader/retainedSince(project:now:)``).
    let serverRetentionDays: Int
    /// Set by the server once the schema is applied and the partitions exist
    /// (`prepareDatabase`): services that poll tables wait for it, so a first start on an
    /// empty database does not log errors about tables that do not exist yet.
    let schemaApplied = ReadyFlag()
    /// One rollup aggregator cycle at a time in this process: ``RollupAggregator``'s and the
    /// readers' (``RollupFreshness``).
    let rollupCycles = RollupCycles()
    /// How long a request's read waits for the aggregator to fold its project's pending reports
    /// before it reads the rollups as they stand: half of `CRASHGUARD_DB_TIMEOUT`, the deadline
    /// of the whole request, so the read itself keeps the other half (``RollupFreshness``).
    let rollupWaitBudget: Duration

    /// The connections each of the server's pools keeps open. PostgresNIO's pool replaces a
    /// closed connection only to keep its minimum: with none, a lease waiting in its queue when
    /// the connections it waited for closed (a PostgreSQL restart) would wait for the next lease
    /// to come along. With one, the pool connects again at once and serves the queue
    /// (docs/server.md, "A statement the driver never answers").
    public static let keptConnections = 1

    /// Creates the pools for `configuration.databaseURL`, each keeping `minimumConnections`
    /// open; sessions run in UTC, without JIT (its compile time, 15 ms and more, exceeded the
    /// run time of the query API's reads).
    public init(configuration: ServerConfiguration, logger: Logger, minimumConnections: Int = keptConnections) throws {
        var config = try PostgresClient.Configuration(url: configuration.databaseURL)
        config.options.maximumConnections = configuration.databasePoolSize
        config.options.minimumConnections = minimumConnections
        config.options.connectTimeout = .seconds(3)
        let session = [("TimeZone", "UTC"), ("jit", "off")]
        config.options.additionalStartupParameters = session + [("application_name", "crash-server")]
        var backgroundLogger = logger
        backgroundLogger[metadataKey: "db"] = "postgres"
        client = PostgresClient(configuration: config, backgroundLogger: backgroundLogger)
        let queryTimeouts = QueryTimeouts(statementTimeout: configuration.queryTimeout)
        config.options.additionalStartupParameters =
            session + [("application_name", QueryTimeouts.applicationName)] + queryTimeouts.startupParameters
        queryClient = PostgresClient(configuration: config, backgroundLogger: backgroundLogger)
        // One connection per committer (IngestBatcher's lanes); the last one is for the rare
        // moments when an abandoned transaction's connection is still closing as the next
        // batch begins.
        config.options.maximumConnections = configuration.ingestLanes + 1
        config.options.additionalStartupParameters =
            session + [("application_name", IngestTimeouts.applicationName)]
            + IngestTimeouts(deadline: configuration.databaseTimeout).startupParameters
        ingestClient = PostgresClient(configuration: config, backgroundLogger: backgroundLogger)
        reader = try (configuration.databaseReadURL.isEmpty ? nil : configuration.databaseReadURL).map {
            try ReadReplica(
                url: $0, poolSize: configuration.databasePoolSize,
                maxLag: configuration.readMaxLag, queryTimeouts: queryTimeouts, logger: logger)
        }
        self.logger = logger
        maxStatementBytes = configuration.maxBatchBytes
        serverRetentionDays = configuration.retentionDays
        rollupWaitBudget = configuration.databaseTimeout / 2
    }

    /// The pools and the standby's monitor, to run as services (the primary's first).
    public var services: [any Service] {
        let pools = [
            Pool(client: client, name: "primary"), Pool(client: queryClient, name: "queries"), Pool(client: ingestClient, name: "ingest"),
        ]
        guard let reader else { return pools }
        return pools + [Pool(client: reader.client, name: "read replica"), ReadReplicaMonitor(database: self, reader: reader)]
    }

    /// A round trip to the primary: succeeds only while it answers (`/readyz`, and the
    /// batcher's probe while the database is marked down).
    func ping() async throws {
        try await client.query("SELECT 1", logger: logger)
    }

    /// A pool as a service that prints as its name. The service group logs each service at
    /// debug level, and a `PostgresClient` prints its whole configuration, password included.
    struct Pool: Service, CustomStringConvertible {
        let client: PostgresClient
        let name: String

        func run() async { await client.run() }

        var description: String { "PostgresClient(\(name))" }
    }
}

/// PostgreSQL's own timeouts for the ingest transaction, derived from the server's deadline:
/// the session defaults of the ingest pool's connections (``CrashDatabase/ingestClient``), which
/// run nothing but ingest transactions.
///
/// A lock wait or a slow statement is ended by PostgreSQL at **half** the deadline: the
/// transaction is rolled back and the database says so (SQLSTATE 55P03 or 57014) well before
/// the server would give up on it, so the answer is a 503 that is known to have stored
/// nothing. The idle timeout is the whole deadline: it only ends a transaction whose client
/// stopped talking to it (the batcher gave up on it), so its row locks do not outlive it.
struct IngestTimeouts: Sendable {
    /// `lock_timeout` and `statement_timeout`.
    var statementMilliseconds: Int
    /// `idle_in_transaction_session_timeout`.
    var idleMilliseconds: Int

    init(deadline: Duration) {
        statementMilliseconds = max(1, Int(deadline.inSeconds * 500))
        idleMilliseconds = max(1, Int(deadline.inSeconds * 1000))
    }

    /// The ingest pool's `application_name`, as `pg_stat_activity` shows it.
    static let applicationName = "crash-server ingest"

    /// The connection's startup parameters: the timeouts, `plan_cache_mode =
    /// force_generic_plan` and `enable_seqscan = off`.
    ///
    /// The transaction's statements are prepared (``FixedStatement``), and PostgreSQL's default
    /// would plan them again at every commit, the plan for a few rows looking cheaper than the
    /// generic one (written for any number of rows, which is what a batch of 1 to 5000 reports
    /// needs anyway). A generic plan is made once per connection, though, with the statistics of
    /// that moment, and kept until the next `ANALYZE` of its tables: made on a fresh database,
    /// it saw empty tables, where a scan of the whole table looks as cheap as an index probe,
    /// and kept scanning as the tables grew. Ingest reads rows by key only, so these sessions
    /// rule sequential scans out wherever an index can answer.
    var startupParameters: [(String, String)] {
        [
            ("lock_timeout", "\(statementMilliseconds)ms"), ("statement_timeout", "\(statementMilliseconds)ms"),
            ("idle_in_transaction_session_timeout", "\(idleMilliseconds)ms"), ("plan_cache_mode", "force_generic_plan"),
            ("enable_seqscan", "off"),
        ]
    }
}

/// PostgreSQL's timeout for read queries (`CRASHGUARD_QUERY_TIMEOUT`): the session default of
/// the query pools (``CrashDatabase/queryClient`` and the standby's), which run nothing but
/// read snapshots.
///
/// PostgreSQL ends a statement that runs longer (SQLSTATE 57014), whatever holds it up: a
/// large scan, a lock wait, a slow client. ``CrashDatabase/withReadSnapshot(_:)`` turns that
/// into a 503 with `Retry-After`; the connection is rolled back and reused at once, so a
/// heavy or hostile query holds a pooled connection for at most this long per statement.
///
/// These sessions also run without parallel workers (`max_parallel_workers_per_gather = 0`).
/// The reads are index probes of a few hundred rows, many at once, and a plan with workers
/// starts them for every statement: on a busy two-core machine that took 5 to 25 ms, where the
/// same read without them took 2 ms (a release page's exact device counts, docs/performance.md).
struct QueryTimeouts: Sendable {
    /// `statement_timeout`.
    var statementMilliseconds: Int

    init(statementTimeout: Duration) { statementMilliseconds = max(1, Int((statementTimeout.inSeconds * 1000).rounded())) }

    /// The primary's query pool's `application_name`, as `pg_stat_activity` shows it.
    static let applicationName = "crash-server queries"

    var startupParameters: [(String, String)] {
        [("statement_timeout", "\(statementMilliseconds)ms"), ("max_parallel_workers_per_gather", "0")]
    }
}

/// Runs `body` with a database whose pool runs for exactly as long as `body` does:
/// for the command-line tools, which have no service group. Its pools connect only when a
/// lease asks (`minimumConnections` 0): a command that uses one pool opens one connection,
/// not one per pool.
public func withDatabase<T: Sendable>(
    _ configuration: ServerConfiguration, logger: Logger, minimumConnections: Int = 0,
    _ body: @Sendable (CrashDatabase) async throws -> T
) async throws -> T {
    try await checkReachable(configuration.databaseURL, logger: logger)
    let db = try CrashDatabase(configuration: configuration, logger: logger, minimumConnections: minimumConnections)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await db.client.run() }
        group.addTask { await db.ingestClient.run() }
        group.addTask { await db.queryClient.run() }
        defer { group.cancelAll() }
        // Let the pool start before the first lease (it would only warn, but loudly).
        try await Task.sleep(for: .milliseconds(20))
        return try await body(db)
    }
}

/// Connects once and closes, so that a command on a database it cannot reach (or may not use)
/// fails at once and says why: a query on the pool would wait for its minute of connection
/// retries and end in an error that names neither the address nor the cause.
func checkReachable(_ url: String, logger: Logger) async throws {
    let parsed = try PostgresURL(url)
    var probe = try PostgresConnection.Configuration(parsed)
    probe.options.connectTimeout = .seconds(5)
    do {
        try await PostgresConnection.connect(configuration: probe, id: 0, logger: logger).close()
    } catch {
        let address = parsed.socket ?? "\(parsed.host):\(parsed.port)"
        throw ConfigurationError("DATABASE_URL: cannot use the database at \(address): \(connectionFailure(error))")
    }
}

/// What a failed connection attempt says, without the password: the server's message (a wrong
/// password, a missing database) or the network's error (refused, timed out, unknown host).
private func connectionFailure(_ error: any Error) -> String {
    guard let psql = error as? PSQLError else { return "\(error)" }
    if let message = psql.serverInfo?[.message] { return message }
    return psql.underlying.map { "\($0)" } ?? "\(psql.code)"
}

/// `true` for errors that mean the database could not be reached (as opposed to a
/// query the database refused): the ones that deserve a 503 and a retry.
func isConnectionError(_ error: any Error) -> Bool {
    if let transaction = error as? TransactionError {
        guard let inner = transaction.beginError ?? transaction.closureError ?? transaction.commitError else { return true }
        return isConnectionError(inner)
    }
    if error is DeadlineExceeded || error is ConnectionClosedMidTransaction { return true }
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

/// `true` for a lock or statement timeout (SQLSTATE 55P03, 57014): the database is up but
/// busy; it rolled the transaction back, and only the requests of that batch are refused.
func isTimeoutError(_ error: any Error) -> Bool {
    guard let state = sqlState(error) else { return false }
    return state == "55P03" || state == "57014"
}

/// `true` when a failed `COMMIT` was answered by the database, so it is known not to have
/// committed: an error response to it, or a connection that an earlier error had already
/// closed (PostgresNIO 1.33 then fails the query without sending it, with that earlier error
/// as `underlying`). Anything else (the connection dropped while `COMMIT` was in flight) leaves
/// the outcome unknown.
func isAnsweredCommitFailure(_ error: any Error) -> Bool {
    guard let psql = error as? PSQLError else { return false }
    switch psql.code {
    case .server:
        return true
    case .clientClosedConnection, .serverClosedConnection:
        return psql.underlying is PSQLError
    default:
        return false
    }
}

/// The SQLSTATE of a server error, looking inside transaction errors.
func sqlState(_ error: any Error) -> String? {
    if let transaction = error as? TransactionError {
        return (transaction.beginError ?? transaction.closureError ?? transaction.commitError).flatMap(sqlState)
    }
    return (error as? PSQLError)?.serverInfo?[.sqlState]
}
