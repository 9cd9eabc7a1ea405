import CrashWire
import Foundation
import Logging

/// Everything the server can be configured with, with defaults that work against the
/// local database that `scripts/postgres` starts.
///
/// Each property holds a setting's type and default; ``settings`` declares, once, how each is
/// named in the environment and on the command line, what it means and which values it takes.
/// Read from the environment by ``init(environment:)``, and with the executable's flags by
/// ``init(flags:environment:command:)``.
public struct ServerConfiguration: Sendable {
    public var databaseURL = "postgres://crashguard@127.0.0.1:54329/crashguard?sslmode=disable"
    /// Empty: every read on ``databaseURL``. See docs/scaling.md.
    public var databaseReadURL = ""
    public var readMaxLag: Duration = .seconds(5)
    public var host = "127.0.0.1"
    public var port = 8080
    /// The base of the Sentry DSNs `project create` prints and of links in messages the server
    /// sends; the dashboard's cookies are `Secure` and `__Host-` unless it is http on a
    /// loopback host.
    public var publicURL = Self.defaultPublicURL
    /// The default ``publicURL``: the default address and port on loopback.
    public static let defaultPublicURL = "http://127.0.0.1:8080"
    public var logLevel: Logger.Level = .info
    public var maxBodyBytes = WireProtocol.defaultMaxCompressedBytes
    public var maxDecompressedBytes = WireProtocol.defaultMaxDecompressedBytes
    /// No request and no project may hold more than half of it (503 past that,
    /// ``BodyByteBudget``), so half of it must hold one largest request. 34 MiB: twice the
    /// default largest request (1 + 16 MiB), and the most the server ever holds, where a larger
    /// budget buys no throughput: a held body costs about three times its decoded bytes in
    /// reports and binds, and the release benchmark stored as many reports/s at 48 MiB as at
    /// 256 MiB while peak RSS fell from 535 to 194 MB (docs/performance.md).
    public var maxInflightBodyBytes = 34 << 20
    public var rateLimit: Double = 1000
    public var rateBurst: Double = 2000
    public var maxQueuedReports = 100_000
    public var maxBatchReports = 5_000
    /// Far below PostgreSQL's 1 GB message limit even if escaping makes the encoded text 6
    /// times larger, quick enough for the statement timeout, and small enough that a batch's
    /// binds do not dominate the server's memory (docs/server.md, "Batch bytes").
    public var maxBatchBytes = 4 << 20
    /// A request whose reports are all of one group (a single report, a Sentry event) is
    /// committed in its group's lane, any other request in the first lane, so that one-group
    /// requests in two lanes never create or lock the same group (docs/server.md, "Lanes").
    public var ingestLanes = 2
    /// Days a project keeps its reports unless its settings say otherwise (data-protection.md).
    public var retentionDays = 90
    /// Time between two removals of reports past their project's retention (``RetentionSweeper``);
    /// zero turns them off.
    public var retentionSweepInterval: Duration = .seconds(3600)
    /// Longest time between two cycles of the rollup aggregator (``RollupAggregator``), which
    /// runs again at once while a cycle was full (docs/server.md, "The rollup aggregator").
    public var rollupInterval: Duration = .seconds(1)
    public var databasePoolSize = 16
    /// Ingest's deadline; PostgreSQL's lock and statement timeouts of an ingest transaction are
    /// half of it (docs/server.md).
    public var databaseTimeout: Duration = .seconds(10)
    /// The session default of the query pools (the primary's and the standby's); a read that
    /// hits it is answered 503 with `Retry-After`.
    public var queryTimeout: Duration = .seconds(10)
    public var readTimeout: Duration = .seconds(30)
    public var idleTimeout: Duration = .seconds(75)
    public var maxConcurrentRequests = 1024
    /// The uploads' share: `/v1/reports`, the Sentry routes and debug files, whose clients set
    /// how long their body takes; the rest is kept for queries, the dashboard and everything else.
    public var ingestShare = 0.75
    public var maxConnections = 10_000
    /// Symbolication (docs/symbolication.md).
    public var maxDebugFileBytes = 256 << 20
    public var llvmSymbolizer = "/usr/bin/llvm-symbolizer"
    public var symbolizers = 2
    public var debugFilesMaxCount = 1000
    public var debugFilesMaxBytes: Int64 = 10 << 30
    public var debugFilesCacheBytes: Int64 = 4 << 30
    /// Empty: a random key per start, so a form shown before a restart must be reloaded
    /// (sessions themselves are rows in the database and survive restarts).
    public var sessionSecret = ""
    /// Empty: `/metrics` is open, for a server whose port only Prometheus reaches.
    public var metricsToken = ""
    /// Webhook delivery and spike detection (docs/alerts.md).
    public var webhooks = WebhookSettings()
    /// Single sign-on with OpenID Connect (docs/accounts.md); off while its issuer is empty.
    public var oidc = OIDCSettings()
    /// Alert e-mail over SMTP (docs/alerts.md); off while its URL is empty.
    public var email = EmailSettings()

    /// The defaults.
    public init() {}

    /// Every setting, in the order of the settings tables in README.md and Deploy/README.md.
    public static let settings: [Setting] = [
        Setting(\.databaseURL, "DATABASE_URL", .everyCommand, "PostgreSQL URL (16 or newer)"),
        Setting(
            \.databaseReadURL, "DATABASE_READ_URL", .serve,
            "PostgreSQL URL of a hot standby for queries and dashboard reads; empty: none"),
        Setting(
            \.readMaxLag, "CRASHGUARD_READ_MAX_LAG", .serve, "seconds the standby may lag before reads go to the primary",
            .when("above 0 and at most 3600") { $0 > .zero && $0 <= .seconds(3600) }),
        Setting(\.host, "CRASHGUARD_HOST", .serve, "address to bind"),
        Setting(\.port, "CRASHGUARD_PORT", .serve, "port to bind; 0 picks a free one", .within(0...65535)),
        Setting(
            \.logLevel, "CRASHGUARD_LOG_LEVEL", .everyCommand, "trace, debug, info, notice, warning, error or critical",
            fallbacks: ["LOG_LEVEL"]),
        Setting(\.maxBodyBytes, "CRASHGUARD_MAX_BODY_BYTES", .serve, "largest compressed request body; 413 above", .atLeast(1)),
        Setting(
            \.maxDecompressedBytes, "CRASHGUARD_MAX_DECOMPRESSED_BYTES", .serve, "largest decompressed request body; 413 above",
            .atLeast(1)),
        Setting(
            \.rateLimit, "CRASHGUARD_RATE_LIMIT", .serve, "ingest requests per second per project, per server; 0 is off",
            .atLeast(0)),
        Setting(\.rateBurst, "CRASHGUARD_RATE_BURST", .serve, "requests a project may send at once above the rate"),
        Setting(
            \.maxInflightBodyBytes, "CRASHGUARD_MAX_INFLIGHT_BODY_BYTES", .serve,
            "request body bytes in flight, received plus decoded; no request or project holds more than half"),
        Setting(
            \.maxQueuedReports, "CRASHGUARD_MAX_QUEUED_REPORTS", .serve, "reports waiting for a commit before ingest answers 503",
            .atLeast(WireProtocol.maxReportsPerBatch)),
        Setting(
            \.maxBatchReports, "CRASHGUARD_MAX_BATCH_REPORTS", .serve, "most reports in one group-commit transaction",
            .atLeast(1)),
        Setting(
            \.maxBatchBytes, "CRASHGUARD_MAX_BATCH_BYTES", .serve,
            "most estimated report bytes in one group-commit transaction; one larger request goes alone", .atLeast(1)),
        Setting(
            \.ingestLanes, "CRASHGUARD_INGEST_LANES", .serve, "group-commit transactions in flight, for one-group requests",
            .within(1...16)),
        Setting(
            \.retentionDays, "CRASHGUARD_RETENTION_DAYS", .serve,
            "days a project keeps its reports unless its settings say otherwise; older ones are removed, rollups included",
            .within(7...365)),
        Setting(
            \.retentionSweepInterval, "CRASHGUARD_RETENTION_INTERVAL", .serve,
            "seconds between removals of reports past their project's retention; 0 is off", .atLeast(.zero)),
        Setting(
            \.rollupInterval, "CRASHGUARD_ROLLUP_INTERVAL", .serve,
            "most seconds between two folds of stored reports into the rollups (queries wait for the fold)",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.databasePoolSize, "CRASHGUARD_DB_POOL_SIZE", .serve, "database connections of each of the two pools",
            .within(1...500)),
        Setting(
            \.databaseTimeout, "CRASHGUARD_DB_TIMEOUT", .serve, "seconds ingest waits for the database before it answers 503",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.queryTimeout, "CRASHGUARD_QUERY_TIMEOUT", .serve, "PostgreSQL's statement timeout of every read query, in seconds",
            .when("0.001 <= seconds <= 3600") { $0 >= .milliseconds(1) && $0 <= .seconds(3600) }),
        Setting(
            \.readTimeout, "CRASHGUARD_READ_TIMEOUT", .serve, "seconds a client may take to send a request body",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.idleTimeout, "CRASHGUARD_IDLE_TIMEOUT", .serve, "seconds an idle keep-alive connection is kept",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.maxConcurrentRequests, "CRASHGUARD_MAX_CONCURRENT_REQUESTS", .serve, "requests handled at once; more get 503",
            .when("at least 2 (one for uploads, one for everything else)") { $0 >= 2 }),
        Setting(
            \.ingestShare, "CRASHGUARD_INGEST_SHARE", .serve, "share of those uploads may hold; the rest is for queries",
            .when("above 0 and below 1 (the part of the concurrent requests uploads may hold)") { $0 > 0 && $0 < 1 }),
        Setting(
            \.maxConnections, "CRASHGUARD_MAX_CONNECTIONS", .serve, "client connections served at once; one more gets 503",
            .atLeast(1)),
        Setting(
            \.maxDebugFileBytes, "CRASHGUARD_MAX_DEBUG_FILE_BYTES", .serve, "largest debug file upload; 413 above",
            .atLeast(1024)),
        Setting(\.llvmSymbolizer, "CRASHGUARD_LLVM_SYMBOLIZER", .serve, "the llvm-symbolizer symbolication runs"),
        Setting(
            \.symbolizers, "CRASHGUARD_SYMBOLIZERS", .serve, "llvm-symbolizer processes running at most", .within(1...64)),
        Setting(
            \.debugFilesMaxCount, "CRASHGUARD_DEBUG_FILES_MAX_COUNT", .serve, "debug files stored per project; 413 past it",
            .atLeast(1)),
        Setting(
            \.debugFilesMaxBytes, "CRASHGUARD_DEBUG_FILES_MAX_BYTES", .serve, "bytes of debug files stored per project; 413 past it",
            .atLeast(1024)),
        Setting(
            \.debugFilesCacheBytes, "CRASHGUARD_DEBUG_FILES_CACHE_BYTES", .serve,
            "bytes of debug files each server keeps for the symbolizer; least recently used go first"),
        Setting(
            \.publicURL, "CRASHGUARD_PUBLIC_URL", .everyCommand, "the URL clients reach the server at",
            Setting.Rule { SentryDSN.isValidPublicURL($0) ? nil : "'\($0)' is not an http(s) URL with a host" }),
        Setting(
            \.metricsToken, "CRASHGUARD_METRICS_TOKEN", .environmentOnly,
            "bearer token GET /metrics requires; empty: /metrics is open"),
        Setting(
            \.sessionSecret, "CRASHGUARD_SESSION_SECRET", .environmentOnly,
            "key of the dashboard forms' CSRF tokens; empty: a random one per start",
            Setting.Rule { $0.isEmpty || $0.utf8.count >= 32 ? nil : "at least 32 bytes (e.g. openssl rand -hex 32)" }),
        Setting(
            \.oidc.issuer, "CRASHGUARD_OIDC_ISSUER", .serve,
            "OpenID Connect provider's issuer URL (https); empty: no single sign-on",
            Setting.Rule { OIDCSettings.issuerProblem($0) }),
        Setting(\.oidc.clientID, "CRASHGUARD_OIDC_CLIENT_ID", .serve, "client id registered with the provider"),
        Setting(\.oidc.clientSecret, "CRASHGUARD_OIDC_CLIENT_SECRET", .environmentOnly, "client secret registered with the provider"),
        Setting(
            \.oidc.allowedDomains, "CRASHGUARD_OIDC_ALLOWED_DOMAINS", .serve,
            "comma-separated e-mail domains whose people get an account at first sign-in",
            parse: { text throws(ConfigurationError) in try OIDCSettings.parseDomains(text) }),
        Setting(
            \.oidc.defaultRole, "CRASHGUARD_OIDC_DEFAULT_ROLE", .serve,
            "role such new users get on every project (viewer, member, admin); empty: none",
            Setting.Rule { $0.isEmpty || OIDCSettings.roles.contains($0) ? nil : "viewer, member or admin" }),
        Setting(
            \.webhooks.timeout, "CRASHGUARD_WEBHOOK_TIMEOUT", .serve,
            "seconds one webhook delivery attempt may take, lookup to last byte", .when("above 0") { $0 > .zero }),
        Setting(
            \.webhooks.pollInterval, "CRASHGUARD_WEBHOOK_POLL_INTERVAL", .serve, "seconds between looks for due deliveries",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.webhooks.retryDelay, "CRASHGUARD_WEBHOOK_RETRY_DELAY", .serve,
            "seconds before a delivery's first retry; doubled per attempt", .when("above 0") { $0 > .zero }),
        Setting(
            \.webhooks.retryMaxDelay, "CRASHGUARD_WEBHOOK_RETRY_MAX_DELAY", .serve, "longest wait between two retries, in seconds"),
        Setting(
            \.webhooks.retryFor, "CRASHGUARD_WEBHOOK_RETRY_FOR", .serve,
            "seconds after the event during which a failed delivery is retried", .atLeast(.zero)),
        Setting(
            \.webhooks.concurrency, "CRASHGUARD_WEBHOOK_CONCURRENCY", .serve, "deliveries sent at once by one server; 0 is off",
            .within(0...256)),
        Setting(
            \.webhooks.allowHosts, "CRASHGUARD_WEBHOOK_ALLOW_HOSTS", .serve,
            "receivers allowed although their host is refused: comma-separated host or host:port",
            parse: { text throws(ConfigurationError) in
                _ = try WebhookAllowList(parsing: text)
                return [String](settingText: text)
            }),
        Setting(
            \.webhooks.spikeInterval, "CRASHGUARD_SPIKE_INTERVAL", .serve, "seconds between spike detections; 0 is off",
            .atLeast(.zero)),
        Setting(
            \.webhooks.alertInterval, "CRASHGUARD_ALERT_INTERVAL", .serve,
            "seconds between checks of the crash-free sessions alert rules; 0 is off", .atLeast(.zero)),
        Setting(
            \.email.smtpURL, "CRASHGUARD_SMTP_URL", .serve,
            "SMTP server of alert e-mail: smtp://[user:password@]host[:port] (STARTTLS when offered) or smtps://...; empty: none",
            Setting.Rule { EmailSettings.urlProblem($0) }),
        Setting(\.email.from, "CRASHGUARD_EMAIL_FROM", .serve, "sender address of alert e-mail; required with an SMTP URL"),
        Setting(
            \.email.timeout, "CRASHGUARD_SMTP_TIMEOUT", .serve, "seconds one e-mail attempt may take, connection to last reply",
            .when("above 0") { $0 > .zero }),
        Setting(
            \.email.caFile, "CRASHGUARD_SMTP_CA_FILE", .serve,
            "PEM certificates trusted for the SMTP server besides the system's; empty: the system's only"),
    ]

    /// The defaults overridden by the environment variables of ``settings``; an empty variable
    /// counts as unset.
    public init(environment: [String: String]) throws(ConfigurationError) {
        for setting in Self.settings {
            for name in setting.fallbacks + [setting.name] {
                guard let text = environment[name], !text.isEmpty else { continue }
                try read(setting, text, from: name)
            }
        }
    }

    /// Stores `text` as `setting`'s value, or throws naming `source` (a variable or flag).
    mutating func read(_ setting: Setting, _ text: String, from source: String) throws(ConfigurationError) {
        guard try setting.assign(&self, text) else { throw ConfigurationError("\(source): cannot parse '\(text)'") }
    }

    /// Throws when a setting is out of its range, or two settings do not fit together.
    public func validate() throws {
        for setting in Self.settings {
            if let problem = setting.problem(self) { throw ConfigurationError(problem) }
        }
        guard maxInflightBodyBytes / 2 >= maxBodyBytes + maxDecompressedBytes else {
            throw ConfigurationError(
                "max inflight body bytes: at least \(2 * (maxBodyBytes + maxDecompressedBytes)), so that half of it holds one "
                    + "largest request (compressed plus decompressed limit)")
        }
        guard rateBurst >= 1 || rateLimit == 0 else { throw ConfigurationError("rate burst: at least 1 while the rate limit is on") }
        guard debugFilesCacheBytes >= Int64(maxDebugFileBytes) else {
            throw ConfigurationError("debug files cache bytes: at least the largest debug file (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
        }
        if let problem = oidc.problem { throw ConfigurationError(problem) }
        if let problem = email.problem { throw ConfigurationError(problem) }
        guard webhooks.retryMaxDelay >= webhooks.retryDelay else {
            throw ConfigurationError("webhook retry max delay: at least the retry delay (CRASHGUARD_WEBHOOK_RETRY_DELAY)")
        }
        // A database on another machine is reached over the network: a placeholder or short
        // password there is one guess away (docs/security.md).
        for (setting, url) in [("DATABASE_URL", databaseURL), ("DATABASE_READ_URL", databaseReadURL)] where !url.isEmpty {
            if let reason = try PostgresURL(url).weakPassword {
                throw ConfigurationError(
                    "\(setting): \(reason); a database that is not on a Unix socket or a loopback address needs a password "
                        + "of at least \(PostgresURL.minimumPasswordLength) characters (e.g. openssl rand -hex 24)")
            }
        }
    }
}

/// A configuration value that cannot be used; the message names it.
public struct ConfigurationError: Error, CustomStringConvertible {
    /// What is wrong.
    public let description: String
    init(_ description: String) { self.description = description }
}
