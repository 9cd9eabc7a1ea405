import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// Wires the whole server: database pool, group-commit batcher, partition upkeep,
/// routes and middleware, all as services of one `Application`.
///
/// Shutdown runs in reverse: the HTTP server stops accepting and finishes its requests,
/// then the batcher commits everything queued, then the pool closes.
public func buildApplication(configuration: ServerConfiguration, logger: Logger) async throws -> some ApplicationProtocol {
    try configuration.validate()
    let database = try CrashDatabase(configuration: configuration, logger: logger)
    let metrics = ServerMetrics()
    if let reader = database.reader { metrics.observeReads(of: reader) }
    metrics.observeRollupWaits(of: database.rollupCycles)
    let timeout = configuration.databaseTimeout
    let ingestStore = PostgresIngestStore(database: database)
    let batcher = IngestBatcher(
        maxQueuedReports: configuration.maxQueuedReports,
        maxBatchReports: configuration.maxBatchReports,
        maxBatchBytes: configuration.maxBatchBytes,
        timeout: timeout,
        metrics: metrics,
        logger: logger,
        store: { try await ingestStore.store($0, gate: $1) },
        lanes: configuration.ingestLanes,
        probe: { try await database.ping() }
    )
    metrics.observeQueue(of: batcher)
    let partitions = PartitionMaintenance(
        schema: PostgresSchemaMaintenance(database: database), database: database,
        retentionDays: configuration.retentionDays, logger: logger)
    let symbolizers = SymbolizerPool(
        executable: configuration.llvmSymbolizer, size: configuration.symbolizers, logger: logger)
    let keys = IngestKeyCache()
    let keyListener = try IngestKeyListener(cache: keys, databaseURL: configuration.databaseURL, logger: logger)
    let budget = BodyByteBudget(limit: configuration.maxInflightBodyBytes, maxWait: timeout, logger: logger)
    let router = try buildRouter(
        database: database, batcher: batcher, metrics: metrics, configuration: configuration, timeout: timeout,
        keys: keys, budget: budget, symbolizers: symbolizers, logger: logger)
    let webhooks = WebhookSender(
        store: PostgresWebhookStore(database: database), queries: PostgresQueryStore(database: database),
        schemaApplied: database.schemaApplied, settings: configuration.webhooks,
        publicURL: configuration.publicURL, metrics: metrics, logger: logger)
    let spikes = SpikeDetector(
        store: PostgresWebhookStore(database: database), schemaApplied: database.schemaApplied,
        settings: configuration.webhooks, logger: logger)
    let email = EmailSender(
        store: PostgresEmailOutboxStore(database: database), queries: PostgresQueryStore(database: database),
        schemaApplied: database.schemaApplied, settings: configuration.email, schedule: configuration.webhooks,
        publicURL: configuration.publicURL, metrics: metrics, logger: logger)
    let alertRules = AlertEvaluator(database: database, interval: configuration.webhooks.alertInterval, logger: logger)
    // Reports past their project's retention, removed with their share of every rollup.
    let retention = RetentionSweeper(
        database: database, serverRetentionDays: configuration.retentionDays, interval: configuration.retentionSweepInterval,
        logger: logger)
    let snoozes = SnoozeWaker(store: PostgresTriageStore(database: database), schemaApplied: database.schemaApplied, logger: logger)
    let deletions = DeletionWorker(
        store: PostgresDeletionStore(database: database), schemaApplied: database.schemaApplied, metrics: metrics, logger: logger)
    let sessionRollups = SessionCompactor(store: PostgresSessionStore(database: database), database: database, logger: logger)
    // The report rollups, folded from what each ingest transaction appends (one server at a time).
    let reportRollups = RollupAggregator(
        store: PostgresRollupStore(database: database), cycles: database.rollupCycles, schemaApplied: database.schemaApplied,
        interval: configuration.rollupInterval, metrics: metrics, logger: logger)
    let trimmer = HeapTrimmer(budget: budget, logger: logger)
    let connectionLimits = ConnectionLimits(configuration: configuration)
    // The batch in flight takes at most three database timeouts (IngestBatcher), plus 5 s.
    let shutdownDeadline = ShutdownDeadline(
        grace: configuration.databaseTimeout * 3 + .seconds(5), logger: logger)
    let connections = ConnectionCounter()
    var app = Application(
        router: router,
        server: .http1(
            configuration: .init(
                additionalChannelHandlers: [ConnectionGuardHandler(limits: connectionLimits, counter: connections)],
                idleTimeout: TimeAmount(configuration.idleTimeout))),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "crash-server"),
        // ShutdownDeadline first: the group shuts services down in reverse order, so it
        // only acts when something before it has not finished within its grace.
        services: [shutdownDeadline] + database.services + [
            keyListener, batcher, partitions, webhooks, email, spikes, alertRules, retention, snoozes, deletions, sessionRollups,
            reportRollups, symbolizers, trimmer,
        ],
        logger: logger
    )
    app.beforeServerStarts {
        try await prepareDatabase(database, partitions: partitions, logger: logger)
    }
    return app
}

/// The routes and middleware, over already-built components.
func buildRouter(
    database: CrashDatabase, batcher: IngestBatcher, metrics: ServerMetrics,
    configuration: ServerConfiguration, timeout: Duration, keys: IngestKeyCache = IngestKeyCache(),
    budget: BodyByteBudget? = nil, symbolizers: SymbolizerPool? = nil, logger: Logger
) throws -> Router<CrashRequestContext> {
    // HEAD wherever GET works (RFC 9110 9.1): health checkers and link checkers probe with it.
    let router = Router(context: CrashRequestContext.self, options: .autoGenerateHeadEndpoints)
    router.add(middleware: MetricsMiddleware(metrics: metrics))
    router.add(middleware: ConcurrencyLimitMiddleware(configuration: configuration, metrics: metrics))
    router.add(middleware: ErrorMiddleware())
    router.add(middleware: ReadAfterMiddleware(enabled: database.reader != nil))
    OperationsController(database: database, metrics: metrics, metricsToken: configuration.metricsToken).addRoutes(to: router)
    metrics.observeKeys(of: keys)
    // Each project's data-protection settings and scrubber, read by every door (data-protection.md).
    let projectSettings = ProjectSettingsCache(store: PostgresProjectSettingsStore(database: database), logger: logger)
    // One authentication, rate limit, body budget and scrubber for every ingest door.
    let authenticator = IngestAuthenticator(
        database: database, keys: keys, batcher: batcher,
        limiter: RateLimiter(rate: configuration.rateLimit, burst: configuration.rateBurst), databaseTimeout: timeout,
        settings: projectSettings)
    let budget = budget ?? BodyByteBudget(limit: configuration.maxInflightBodyBytes, maxWait: timeout, logger: logger)
    metrics.observeBudget(budget)
    let body = IngestBody(
        maxBodyBytes: configuration.maxBodyBytes, maxDecompressedBytes: configuration.maxDecompressedBytes, budget: budget)
    // The daily quota and retention of each request's project, from the same cached settings.
    let limits = CachedProjectLimits(cache: projectSettings, serverRetentionDays: configuration.retentionDays)
    IngestController(authenticator: authenticator, batcher: batcher, metrics: metrics, body: body, limits: limits)
        .addRoutes(to: router)
    // Apple's own crash reports (.ips, MetricKit): the same ingest path (apple.md).
    AppleReportsController(authenticator: authenticator, batcher: batcher, metrics: metrics, body: body, limits: limits)
        .addRoutes(to: router)
    // Release health: sessions through both doors, counted by one store (release-health.md).
    let sessions = SessionIngest(
        store: PostgresSessionStore(database: database, deadline: timeout), batcher: batcher, metrics: metrics, deadline: timeout)
    let sentry = SentryController(
        authenticator: authenticator, batcher: batcher, metrics: metrics, body: body, limits: limits, sessions: sessions)
    sentry.addRoutes(to: router)
    SessionsController(authenticator: authenticator, ingest: sessions, body: body).addRoutes(to: router)
    // Reads, triage, the dashboard and webhooks answer 503 once the database deadline passes,
    // however the database fails (a pool that cannot connect would hold them for a minute).
    let bounded = router.group().add(middleware: DatabaseDeadlineMiddleware(limit: timeout))
    QueryController(
        store: PostgresQueryStore(database: database),
        symbolicator: symbolizers.map {
            ReportSymbolicator(
                store: PostgresDebugFileStore(database: database), reports: PostgresQueryStore(database: database), pool: $0,
                cacheBytes: configuration.debugFilesCacheBytes, logger: logger)
        }
    ).addRoutes(to: bounded)
    TriageController(
        triage: TriageService(store: PostgresTriageStore(database: database), queries: QueryService(store: PostgresQueryStore(database: database)))
    ).addRoutes(to: bounded)
    let releases = ReleasesController(database: database)
    releases.addRoutes(to: bounded)
    ProjectSettingsController(
        cache: projectSettings, projects: PostgresProjectStore(database: database),
        serverRetentionDays: configuration.retentionDays
    ).addRoutes(to: bounded)
    DebugFileController(
        store: PostgresDebugFileStore(database: database), projects: PostgresProjectStore(database: database),
        maxBytes: configuration.maxDebugFileBytes,
        quota: DebugFileQuota(maxCount: configuration.debugFilesMaxCount, maxBytes: configuration.debugFilesMaxBytes),
        budget: budget, spoolDirectory: DebugFileSpool.uploadDirectory
    ).addRoutes(to: router)
    // sentry-cli's chunk upload and difs/assemble: the same debug files, limits and token (apple.md).
    ChunkUploadController(
        files: PostgresDebugFileStore(database: database), chunks: PostgresChunkUploadStore(database: database),
        projects: PostgresProjectStore(database: database), maxBytes: configuration.maxDebugFileBytes,
        quota: DebugFileQuota(maxCount: configuration.debugFilesMaxCount, maxBytes: configuration.debugFilesMaxBytes),
        budget: budget, spoolDirectory: DebugFileSpool.uploadDirectory
    ).addRoutes(to: router)
    try addDashboard(to: bounded, database: database, releases: releases, configuration: configuration, logger: logger)
    // Single sign-on with OpenID Connect (docs/accounts.md): /dashboard/sso/start and /callback,
    // bounded by the database's deadline plus the identity provider's.
    try addSingleSignOn(to: router, database: database, configuration: configuration, logger: logger)
    // Members, API tokens and the audit log (docs/accounts.md).
    AccountsController(database: database, publicURL: configuration.publicURL, logger: logger).addRoutes(to: bounded)
    WebhookController(
        store: PostgresWebhookStore(database: database), projects: PostgresProjectStore(database: database),
        allowList: configuration.webhooks.allowList
    ).addRoutes(to: bounded)
    AlertRuleController(
        store: PostgresAlertRuleStore(database: database), projects: PostgresProjectStore(database: database),
        email: configuration.email.enabled
    ).addRoutes(to: bounded)
    // Erasure by device (data-protection.md): the request here, the work in DeletionWorker.
    ErasureController(store: PostgresDeletionStore(database: database), projects: PostgresProjectStore(database: database))
        .addRoutes(to: bounded)
    return router
}

/// Applies the schema and creates partitions, retrying for up to a minute while the
/// database is still starting (as under `docker compose up`).
func prepareDatabase(_ database: CrashDatabase, partitions: PartitionMaintenance, logger: Logger) async throws {
    let deadline = ContinuousClock.now + .seconds(60)
    while true {
        do {
            try await partitions.schema.migrate()
            try await partitions.runOnce()
            database.schemaApplied.set()
            return
        } catch {
            guard ContinuousClock.now < deadline, isConnectionError(error) else { throw error }
            logger.warning("database not ready; retrying", metadata: ["error.message": "\(error)"])
            try await Task.sleep(for: .seconds(1))
        }
    }
}
