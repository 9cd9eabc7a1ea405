import ServiceLifecycle

/// The two waits of the alert services' polling loops (``SpikeDetector``, ``WebhookSender``).
enum PollingService {
    /// A service switched off on this server (its interval or concurrency is 0) waits for
    /// shutdown instead of returning: a service that returned would end the whole group.
    static func idleUntilShutdown() async {
        try? await gracefulShutdown()
    }

    /// Waits until the server has applied the schema (``CrashDatabase/schemaApplied``), or
    /// shutdown begins: the services start beside the migration, and on an empty database
    /// their first poll would fail on tables that do not exist yet.
    static func waitForSchema(of database: CrashDatabase) async {
        await waitForSchema(database.schemaApplied)
    }

    /// Waits until `schemaApplied` is set, or shutdown begins.
    static func waitForSchema(_ schemaApplied: ReadyFlag) async {
        while !schemaApplied.isSet, !Task.isCancelled, !Task.isShuttingDownGracefully {
            await sleep(seconds: 0.05)
        }
    }

    /// Sleeps `duration` (a setting), or less when graceful shutdown begins.
    static func sleep(for duration: Duration) async {
        try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: duration)
        }
    }

    /// Sleeps `seconds`, or less when graceful shutdown begins.
    static func sleep(seconds: Double) async { await sleep(for: .seconds(seconds)) }
}
