import Logging
import ServiceLifecycle

/// The `Service` that reopens groups snoozed until a time once it has come
/// (``TriageStore/wakeDueSnoozes(limit:)``: `open`, a `reappeared` entry and the
/// `group.reappeared` deliveries in one transaction), every ``interval``: well within the
/// contract's 10 s. Reads show such a group `open` from its time on even before this runs.
/// Safe with several servers: a group is reopened once (the update re-checks it under its lock).
struct SnoozeWaker<Store: TriageStore>: Service {
    let store: Store
    /// Set once the schema is applied (``CrashDatabase/schemaApplied``).
    let schemaApplied: ReadyFlag
    let logger: Logger

    /// Time between checks.
    static var interval: Duration { .seconds(2) }
    /// Most groups reopened by one check (the next check takes the rest at once).
    static var batch: Int { 500 }

    func run() async throws {
        await PollingService.waitForSchema(schemaApplied)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            var full = false
            do {
                let woken = try await store.wakeDueSnoozes(limit: Self.batch)
                full = woken.count == Self.batch
                if !woken.isEmpty { logger.info("snoozed crash groups reappeared", metadata: ["groups": "\(woken)"]) }
            } catch {
                logger.warning("snooze check failed", metadata: ["error.message": "\(String(reflecting: error))"])
            }
            if !full { await PollingService.sleep(for: Self.interval) }
        }
    }
}
