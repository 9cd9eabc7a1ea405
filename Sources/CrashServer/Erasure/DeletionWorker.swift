import CoreMetrics
import Logging
import Metrics
import ServiceLifecycle

/// The `Service` that carries out deletions (``DeletionStore/step(limit:)``), one step after
/// another while any is pending, else a look every ``interval``. Safe with several servers: a
/// deletion is held by one step at a time (`FOR UPDATE SKIP LOCKED`), and every step commits
/// its progress with its deletes, so a server that stops mid-way leaves the rest to the next
/// step of any server.
struct DeletionWorker<Store: DeletionStore>: Service {
    let store: Store
    /// Set once the schema is applied (``CrashDatabase/schemaApplied``).
    let schemaApplied: ReadyFlag
    let metrics: ServerMetrics
    let logger: Logger

    /// Time between looks for pending deletions.
    static var interval: Duration { .seconds(1) }
    /// Reports erased per transaction: large enough that 100,000 reports take a few dozen steps,
    /// small enough that a step holds its groups' locks (which ingest of those groups waits on)
    /// for well under a second.
    static var chunk: Int { 2_000 }

    func run() async throws {
        await PollingService.waitForSchema(schemaApplied)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            var busy = false
            do {
                busy = try await runOnce() != nil
            } catch {
                logger.warning("deletion step failed", metadata: ["error.message": "\(String(reflecting: error))"])
            }
            if !busy { await PollingService.sleep(for: Self.interval) }
        }
    }

    /// Takes one step of a pending deletion; nil when none is pending.
    @discardableResult
    func runOnce() async throws -> DeletionStep? {
        let step = try await store.step(limit: Self.chunk)
        switch step {
        case .erased(_, let reports): metrics.countErased(reports)
        case .done(let id): logger.info("deletion done", metadata: ["deletion.id": "\(id)"])
        case .listed, .rebuilt, nil: break
        }
        return step
    }

    /// Steps until no deletion is pending.
    func drain() async throws {
        while try await runOnce() != nil {}
    }
}

extension ServerMetrics {
    /// Counts reports erased by deletions (`crashguard_erased_reports_total`).
    func countErased(_ reports: Int) {
        Metrics.Counter(label: "crashguard_erased_reports_total", factory: factory).increment(by: reports)
    }
}
