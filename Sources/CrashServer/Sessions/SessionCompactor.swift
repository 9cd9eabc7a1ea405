import Logging
import ServiceLifecycle

/// Folds the rollup deltas that session ingest appends into the hourly and daily rollups
/// (``SessionStore/compactSessions(limit:)``), about every second, so that the release
/// queries read few deltas. Queries count the deltas not folded yet, so how late it runs
/// changes their cost, never their answers.
struct SessionCompactor: Service {
    let store: any SessionStore
    let database: CrashDatabase
    let logger: Logger

    /// Seconds between folds once the deltas are all folded.
    static let interval = 1.0
    /// Deltas per transaction.
    static let batch = 2000

    func run() async throws {
        await PollingService.waitForSchema(of: database)
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                while try await store.compactSessions(limit: Self.batch) == Self.batch, !Task.isShuttingDownGracefully {}
            } catch {
                logger.warning("session rollups not folded; retrying", metadata: ["error.message": "\(error)"])
            }
            await PollingService.sleep(seconds: Self.interval)
        }
    }
}
