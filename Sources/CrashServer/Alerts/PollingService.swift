import ServiceLifecycle

/// The two waits of the alert services' polling loops (``SpikeDetector``, ``WebhookSender``).
enum PollingService {
    /// A service switched off on this server (its interval or concurrency is 0) waits for
    /// shutdown instead of returning: a service that returned would end the whole group.
    static func idleUntilShutdown() async {
        try? await gracefulShutdown()
    }

    /// Sleeps `seconds` (a setting), or less when graceful shutdown begins.
    static func sleep(seconds: Double) async {
        try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
        }
    }
}
