import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle

/// Keeps every replica's ``IngestKeyCache`` in step with `projects`: `LISTEN`s on
/// ``IngestKeyCache/channel`` over a connection of its own (not one of the pool's) and drops
/// the cache on each notification, then confirms on
/// ``IngestKeyCache/confirmationChannel`` so `project rotate` can wait for it.
///
/// The cache is trusted only between a successful `LISTEN` and the loss of that connection
/// (noticed on the connection's event loop as it closes, before any later request can read
/// the cache); meanwhile it is bypassed, and the listener reconnects every `retryDelay`.
///
/// Prints as its name (``CrashDatabase/Pool``): its connection configuration holds the password.
struct IngestKeyListener: Service, CustomStringConvertible {
    var description: String { "IngestKeyListener" }

    let cache: IngestKeyCache
    let configuration: PostgresConnection.Configuration
    let retryDelay: Duration
    let logger: Logger

    init(cache: IngestKeyCache, databaseURL: String, retryDelay: Duration = .seconds(1), logger: Logger) throws {
        var configuration = try PostgresConnection.Configuration(url: databaseURL)
        configuration.options.connectTimeout = .seconds(3)
        configuration.options.additionalStartupParameters = [("application_name", "crash-server")]
        self.cache = cache
        self.configuration = configuration
        self.retryDelay = retryDelay
        self.logger = logger
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var connectionID = 0
            var failing = false
            while !Task.isCancelled {
                connectionID += 1
                do {
                    try await listen(connectionID: connectionID, failing: &failing)
                } catch  where !Task.isCancelled {
                    if !failing {
                        logger.warning(
                            "ingest-key listener lost; every ingest key is looked up in the database until it is back",
                            metadata: ["error.message": "\(String(reflecting: error))"])
                    }
                    failing = true
                } catch {}
                cache.lost(connectionID)
                try? await Task.sleep(for: retryDelay)
            }
        }
    }

    /// Connects, listens and handles notifications until the connection fails or the task
    /// is cancelled.
    private func listen(connectionID: Int, failing: inout Bool) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: connectionID, logger: logger)
        // On the event loop, as the connection closes: no request sees a trusted cache after.
        connection.closeFuture.whenComplete { [cache] _ in cache.lost(connectionID) }
        do {
            try await connection.listen(on: IngestKeyCache.channel) { notifications in
                try await connection.query(
                    "SELECT set_config('application_name', \(IngestKeyCache.listenerName), false)", logger: logger)
                cache.listening(connectionID)
                if failing { logger.info("ingest-key listener back; ingest keys are cached again") }
                failing = false
                for try await notification in notifications {
                    cache.invalidate()
                    try await connection.query(
                        "SELECT pg_notify(\(IngestKeyCache.confirmationChannel), \(notification.payload))", logger: logger)
                }
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }
}
