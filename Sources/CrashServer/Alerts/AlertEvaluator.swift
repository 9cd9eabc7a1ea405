import Foundation
import Logging
import ServiceLifecycle

/// The `Service` that checks the `crashFreeSessions` alert rules every
/// ``WebhookSettings/alertInterval`` seconds
/// (``AlertRuleFiring/checkCrashFreeSessions(at:database:logger:)``). Safe with several
/// servers: each checks, and the throttle's conditional upsert lets one firing through per
/// rule, version and throttle window. `now` is its clock (tests give their own).
struct AlertEvaluator: Service {
    let database: CrashDatabase
    let interval: Duration
    var now: @Sendable () -> Date = { Date() }
    let logger: Logger

    func run() async throws {
        guard interval > .zero else { return await PollingService.idleUntilShutdown() }
        await PollingService.waitForSchema(of: database)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            await check()
            await PollingService.sleep(for: interval)
        }
    }

    /// One check at ``now``; a failure is logged and the next check tries again.
    func check() async {
        do {
            let fired = try await AlertRuleFiring.checkCrashFreeSessions(at: now(), database: database, logger: logger)
            if !fired.isEmpty {
                logger.info(
                    "crash-free sessions below alert thresholds",
                    metadata: ["rules": "\(fired.map { "\($0.rule)@\($0.release)" })"])
            }
        } catch {
            logger.warning("crash-free sessions check failed", metadata: ["error.message": "\(String(reflecting: error))"])
        }
    }
}
