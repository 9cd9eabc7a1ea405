import Foundation
import Logging
import ServiceLifecycle

/// The `Service` that looks for spiking groups every ``WebhookSettings/spikeInterval``
/// seconds (see ``PostgresWebhookStore/detectSpikes(now:)``: one statement over the hourly
/// rollups, safe with several servers) and, once an hour, prunes deliveries older than 30 days.
struct SpikeDetector: Service {
    let store: any WebhookStore
    /// Set once the schema is applied (``CrashDatabase/schemaApplied``).
    let schemaApplied: ReadyFlag
    let settings: WebhookSettings
    let logger: Logger

    func run() async throws {
        guard settings.spikeInterval > .zero else { return await PollingService.idleUntilShutdown() }
        await PollingService.waitForSchema(schemaApplied)
        var lastPrune = ContinuousClock.now - .seconds(3600)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                let spiking = try await store.detectSpikes()
                if !spiking.isEmpty { logger.info("crash groups spiking", metadata: ["groups": "\(spiking)"]) }
                if ContinuousClock.now - lastPrune >= .seconds(3600) {
                    try await store.pruneDeliveries(olderThanDays: 30)
                    lastPrune = .now
                }
            } catch {
                logger.warning("spike detection failed", metadata: ["error.message": "\(String(reflecting: error))"])
            }
            await PollingService.sleep(for: settings.spikeInterval)
        }
    }
}
