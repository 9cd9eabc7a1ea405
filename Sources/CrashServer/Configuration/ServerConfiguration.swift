import CrashWire
import Foundation
import Logging

/// Everything the server can be configured with, with defaults that work against the
/// local database that `scripts/postgres` starts.
///
/// Read from the environment by ``init(environment:)``; the executable lets flags override.
public struct ServerConfiguration: Sendable {
    /// PostgreSQL URL (`DATABASE_URL`).
    public var databaseURL = "postgres://crashguard@127.0.0.1:54329/crashguard?sslmode=disable"
    /// PostgreSQL URL of a streaming hot standby for queries and dashboard reads
    /// (`DATABASE_READ_URL`); empty: everything on ``databaseURL``. See docs/scaling.md.
    public var databaseReadURL = ""
    /// Seconds the standby may lag before reads go to the primary (`CRASHGUARD_READ_MAX_LAG`).
    public var readMaxLag: Double = 5
    /// Address to bind (`CRASHGUARD_HOST`).
    public var host = "127.0.0.1"
    /// Port to bind (`CRASHGUARD_PORT`); 0 picks a free one.
    public var port = 8080
    /// The URL clients reach this server at (`CRASHGUARD_PUBLIC_URL`): the base of the
    /// Sentry DSNs `project create` prints and of links in messages the server sends; the
    /// dashboard's cookies are `Secure` and `__Host-` unless it is http on a loopback host.
    public var publicURL = Self.defaultPublicURL
    /// The default ``publicURL``: the default address and port on loopback.
    public static let defaultPublicURL = "http://127.0.0.1:8080"
    /// Log level (`CRASHGUARD_LOG_LEVEL`, or `LOG_LEVEL`).
    public var logLevel: Logger.Level = .info
    /// Largest compressed body (`CRASHGUARD_MAX_BODY_BYTES`); over it is 413.
    public var maxBodyBytes = WireProtocol.defaultMaxCompressedBytes
    /// Largest decompressed body (`CRASHGUARD_MAX_DECOMPRESSED_BYTES`); over it is 413.
    public var maxDecompressedBytes = WireProtocol.defaultMaxDecompressedBytes
    /// Request body bytes in flight across every door, received plus decoded, debug-file
    /// uploads included (`CRASHGUARD_MAX_INFLIGHT_BODY_BYTES`); no request and no project may
    /// hold more than half of it (503 past that, ``BodyByteBudget``), so half of it must hold
    /// one largest request. 34 MiB: twice the default largest request (1 + 16 MiB), and the
    /// most the server ever holds, where a larger budget buys no throughput: a held body costs
    /// about three times its decoded bytes in reports and binds, and the release benchmark
    /// stored as many reports/s at 48 MiB as at 256 MiB while peak RSS fell from 535 to 194 MB
    /// (docs/performance.md).
    public var maxInflightBodyBytes = 34 << 20
    /// Ingest requests per second per project, per server (`CRASHGUARD_RATE_LIMIT`); 0 is off.
    public var rateLimit: Double = 1000
    /// Requests a project may send at once above the rate (`CRASHGUARD_RATE_BURST`).
    public var rateBurst: Double = 2000
    /// Reports waiting for a commit before ingest answers 503 (`CRASHGUARD_MAX_QUEUED_REPORTS`).
    public var maxQueuedReports = 100_000
    /// Most reports written in one group-commit transaction (`CRASHGUARD_MAX_BATCH_REPORTS`).
    public var maxBatchReports = 5_000
    /// Most estimated bytes of reports written in one group-commit transaction
    /// (`CRASHGUARD_MAX_BATCH_BYTES`); one request over it is written alone. Far below
    /// PostgreSQL's 1 GB message limit even if escaping makes the encoded text 6 times larger,
    /// quick enough for the statement timeout, and small enough that a batch's binds do not
    /// dominate the server's memory (docs/server.md, "Batch bytes").
    public var maxBatchBytes = 4 << 20
    /// Group-commit transactions in flight at once (`CRASHGUARD_INGEST_LANES`): a request whose
    /// reports are all of one group (a single report, a Sentry event) is committed in its
    /// group's lane, any other request in the first lane, so that one-group requests in two
    /// lanes never create or lock the same group (docs/server.md, "Lanes").
    public var ingestLanes = 2
    /// Days of raw reports kept (`CRASHGUARD_RETENTION_DAYS`), at least 31; groups and rollups stay.
    public var retentionDays = 90
    /// Database connections (`CRASHGUARD_DB_POOL_SIZE`).
    public var databasePoolSize = 16
    /// Longest wait for a database answer before ingest gives up with 503, in seconds
    /// (`CRASHGUARD_DB_TIMEOUT`).
    public var databaseTimeout: Double = 10
    /// PostgreSQL's `statement_timeout` of every read query, in seconds
    /// (`CRASHGUARD_QUERY_TIMEOUT`): the session default of the query pools (the primary's and
    /// the standby's); a read that hits it is answered 503 with `Retry-After`.
    public var queryTimeout: Double = 10
    /// Seconds a client may take to send a request body (`CRASHGUARD_READ_TIMEOUT`).
    public var readTimeout: Double = 30
    /// Seconds an idle keep-alive connection is kept (`CRASHGUARD_IDLE_TIMEOUT`).
    public var idleTimeout: Double = 75
    /// Most requests handled at once before new ones get 503 (`CRASHGUARD_MAX_CONCURRENT_REQUESTS`).
    public var maxConcurrentRequests = 1024
    /// Share of ``maxConcurrentRequests`` that uploads may hold (`CRASHGUARD_INGEST_SHARE`):
    /// `/v1/reports`, the Sentry routes and debug files, whose clients set how long their body
    /// takes; the rest is kept for queries, the dashboard and everything else. Above 0, below 1.
    public var ingestShare = 0.75
    /// Connections served at once; one more is answered 503 and closed (`CRASHGUARD_MAX_CONNECTIONS`).
    public var maxConnections = 10_000
    /// Symbolication (docs/symbolication.md): largest debug file upload
    /// (`CRASHGUARD_MAX_DEBUG_FILE_BYTES`), llvm-symbolizer (`CRASHGUARD_LLVM_SYMBOLIZER`)
    /// and how many run at once (`CRASHGUARD_SYMBOLIZERS`).
    public var maxDebugFileBytes = 256 << 20
    public var llvmSymbolizer = "/usr/bin/llvm-symbolizer"
    public var symbolizers = 2
    /// Each project's quota of stored debug files: how many (`CRASHGUARD_DEBUG_FILES_MAX_COUNT`)
    /// and how many bytes together (`CRASHGUARD_DEBUG_FILES_MAX_BYTES`); 413 past either.
    public var debugFilesMaxCount = 1000
    public var debugFilesMaxBytes: Int64 = 10 << 30
    /// Most bytes of debug files each server keeps in its local cache for the symbolizer
    /// (`CRASHGUARD_DEBUG_FILES_CACHE_BYTES`); the least recently used go first.
    public var debugFilesCacheBytes: Int64 = 4 << 30
    /// Key of the dashboard forms' CSRF tokens (`CRASHGUARD_SESSION_SECRET`, at least 32 bytes);
    /// empty: a random one per start, so a form shown before a restart must be reloaded
    /// (sessions themselves are rows in the database and survive restarts).
    public var sessionSecret = ""
    /// Bearer token `GET /metrics` requires (`CRASHGUARD_METRICS_TOKEN`); empty: `/metrics` is
    /// open, for a server whose port only Prometheus reaches.
    public var metricsToken = ""
    /// Webhook delivery and spike detection (`CRASHGUARD_WEBHOOK_*`, `CRASHGUARD_SPIKE_INTERVAL`).
    public var webhooks = WebhookSettings()

    /// The defaults.
    public init() {}

    /// The defaults overridden by the environment variables named on each property.
    public init(environment env: [String: String]) throws {
        func value<T>(_ name: String, _ parse: (String) -> T?) throws -> T? {
            guard let raw = env[name], !raw.isEmpty else { return nil }
            guard let parsed = parse(raw) else { throw ConfigurationError("\(name): cannot parse '\(raw)'") }
            return parsed
        }
        if let v = try value("DATABASE_URL", { $0 }) { databaseURL = v }
        if let v = try value("DATABASE_READ_URL", { $0 }) { databaseReadURL = v }
        if let v = try value("CRASHGUARD_READ_MAX_LAG", Double.init) { readMaxLag = v }
        if let v = try value("CRASHGUARD_HOST", { $0 }) { host = v }
        if let v = try value("CRASHGUARD_PORT", Int.init) { port = v }
        if let v = try value("CRASHGUARD_PUBLIC_URL", { $0 }) { publicURL = v }
        if let v = try value("LOG_LEVEL", Logger.Level.init(rawValue:)) { logLevel = v }
        if let v = try value("CRASHGUARD_LOG_LEVEL", Logger.Level.init(rawValue:)) { logLevel = v }
        if let v = try value("CRASHGUARD_MAX_BODY_BYTES", Int.init) { maxBodyBytes = v }
        if let v = try value("CRASHGUARD_MAX_DECOMPRESSED_BYTES", Int.init) { maxDecompressedBytes = v }
        if let v = try value("CRASHGUARD_MAX_INFLIGHT_BODY_BYTES", Int.init) { maxInflightBodyBytes = v }
        if let v = try value("CRASHGUARD_RATE_LIMIT", Double.init) { rateLimit = v }
        if let v = try value("CRASHGUARD_RATE_BURST", Double.init) { rateBurst = v }
        if let v = try value("CRASHGUARD_MAX_QUEUED_REPORTS", Int.init) { maxQueuedReports = v }
        if let v = try value("CRASHGUARD_MAX_BATCH_REPORTS", Int.init) { maxBatchReports = v }
        if let v = try value("CRASHGUARD_MAX_BATCH_BYTES", Int.init) { maxBatchBytes = v }
        if let v = try value("CRASHGUARD_INGEST_LANES", Int.init) { ingestLanes = v }
        if let v = try value("CRASHGUARD_RETENTION_DAYS", Int.init) { retentionDays = v }
        if let v = try value("CRASHGUARD_DB_POOL_SIZE", Int.init) { databasePoolSize = v }
        if let v = try value("CRASHGUARD_DB_TIMEOUT", Double.init) { databaseTimeout = v }
        if let v = try value("CRASHGUARD_QUERY_TIMEOUT", Double.init) { queryTimeout = v }
        if let v = try value("CRASHGUARD_READ_TIMEOUT", Double.init) { readTimeout = v }
        if let v = try value("CRASHGUARD_IDLE_TIMEOUT", Double.init) { idleTimeout = v }
        if let v = try value("CRASHGUARD_MAX_CONCURRENT_REQUESTS", Int.init) { maxConcurrentRequests = v }
        if let v = try value("CRASHGUARD_INGEST_SHARE", Double.init) { ingestShare = v }
        if let v = try value("CRASHGUARD_MAX_CONNECTIONS", Int.init) { maxConnections = v }
        if let v = try value("CRASHGUARD_MAX_DEBUG_FILE_BYTES", Int.init) { maxDebugFileBytes = v }
        if let v = try value("CRASHGUARD_LLVM_SYMBOLIZER", { $0 }) { llvmSymbolizer = v }
        if let v = try value("CRASHGUARD_SYMBOLIZERS", Int.init) { symbolizers = v }
        if let v = try value("CRASHGUARD_DEBUG_FILES_MAX_COUNT", Int.init) { debugFilesMaxCount = v }
        if let v = try value("CRASHGUARD_DEBUG_FILES_MAX_BYTES", Int64.init) { debugFilesMaxBytes = v }
        if let v = try value("CRASHGUARD_DEBUG_FILES_CACHE_BYTES", Int64.init) { debugFilesCacheBytes = v }
        if let v = try value("CRASHGUARD_SESSION_SECRET", { $0 }) { sessionSecret = v }
        if let v = try value("CRASHGUARD_METRICS_TOKEN", { $0 }) { metricsToken = v }
        try webhooks.read(environment: env)
    }

    /// Throws when a setting is out of its range.
    public func validate() throws {
        guard (0...65535).contains(port) else { throw ConfigurationError("port: \(port) is not 0...65535") }
        guard SentryDSN.isValidPublicURL(publicURL) else {
            throw ConfigurationError("public URL: '\(publicURL)' is not an http(s) URL with a host")
        }
        guard maxBodyBytes > 0, maxDecompressedBytes > 0 else { throw ConfigurationError("size limits must be positive") }
        guard maxInflightBodyBytes / 2 >= maxBodyBytes + maxDecompressedBytes else {
            throw ConfigurationError(
                "max inflight body bytes: at least \(2 * (maxBodyBytes + maxDecompressedBytes)), so that half of it holds one "
                    + "largest request (compressed plus decompressed limit)")
        }
        guard rateLimit >= 0, rateBurst >= 1 || rateLimit == 0 else { throw ConfigurationError("rate limit: rate >= 0 and burst >= 1") }
        guard maxQueuedReports >= WireProtocol.maxReportsPerBatch else {
            throw ConfigurationError("max queued reports: at least \(WireProtocol.maxReportsPerBatch)")
        }
        guard maxBatchReports >= 1 else { throw ConfigurationError("max batch reports: at least 1") }
        guard maxBatchBytes >= 1 else { throw ConfigurationError("max batch bytes: at least 1") }
        guard (1...16).contains(ingestLanes) else { throw ConfigurationError("ingest lanes: 1...16") }
        guard retentionDays >= 31 else {
            throw ConfigurationError("retention days: at least 31 (reports up to 30 days old are accepted)")
        }
        guard (1...500).contains(databasePoolSize) else { throw ConfigurationError("db pool size: 1...500") }
        guard databaseTimeout > 0, readTimeout > 0, idleTimeout > 0 else { throw ConfigurationError("timeouts must be positive") }
        guard queryTimeout >= 0.001, queryTimeout <= 3600 else { throw ConfigurationError("query timeout: 0.001 <= seconds <= 3600") }
        guard maxConcurrentRequests >= 2 else {
            throw ConfigurationError("max concurrent requests: at least 2 (one for uploads, one for everything else)")
        }
        guard ingestShare > 0, ingestShare < 1 else {
            throw ConfigurationError("ingest share: above 0 and below 1 (the part of the concurrent requests uploads may hold)")
        }
        guard maxConnections >= 1 else { throw ConfigurationError("max connections: at least 1") }
        guard readMaxLag > 0, readMaxLag <= 3600 else { throw ConfigurationError("read max lag: 0 < seconds <= 3600") }
        guard maxDebugFileBytes >= 1024 else { throw ConfigurationError("max debug file bytes: at least 1024") }
        guard (1...64).contains(symbolizers) else { throw ConfigurationError("symbolizers: 1 to 64") }
        guard debugFilesMaxCount >= 1 else { throw ConfigurationError("debug files max count: at least 1") }
        guard debugFilesMaxBytes >= 1024 else { throw ConfigurationError("debug files max bytes: at least 1024") }
        guard debugFilesCacheBytes >= Int64(maxDebugFileBytes) else {
            throw ConfigurationError("debug files cache bytes: at least the largest debug file (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
        }
        if !sessionSecret.isEmpty, sessionSecret.utf8.count < 32 {
            throw ConfigurationError("session secret: at least 32 bytes (e.g. openssl rand -hex 32)")
        }
        try webhooks.validate()
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
