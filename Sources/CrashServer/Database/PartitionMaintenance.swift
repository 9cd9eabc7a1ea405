import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Keeps daily partitions of `reports` ahead of time and drops those past the longest retention
/// a project may have (365 days: ``RetentionSweeper`` has removed their reports, rollups
/// included, by then); prunes the list snapshots of cursors older than a day, sessions that can
/// no longer change, chunk uploads past their keep and the daily quota's rows of past days.
///
/// Runs once before the server accepts traffic (see `buildApplication`) and hourly after.
struct PartitionMaintenance: Service {
    let schema: any SchemaMaintenance
    /// The list snapshots and sessions it prunes are read through their stores on it.
    let database: CrashDatabase
    let retentionDays: Int
    let logger: Logger

    /// The days whose partitions exist ahead of the reports: from 31 days back (the oldest
    /// timestamp taken is 30 days old) to 3 days ahead (1 day is taken; two more cover
    /// maintenance that fails for a day).
    static func partitionedDays(around now: Date) -> (first: Date, last: Date) {
        (now.addingTimeInterval(-31 * 86_400), now.addingTimeInterval(3 * 86_400))
    }

    /// Ensures the partitions of ``partitionedDays(around:)``; drops those older than any retention.
    func runOnce(now: Date = Date()) async throws {
        let day = 86_400.0
        let (first, last) = Self.partitionedDays(around: now)
        let cutoff = now.addingTimeInterval(-Double(max(retentionDays, ProjectSettings.retentionDaysRange.upperBound) + 1) * day)
        let (created, dropped) = try await schema.maintainPartitions(from: first, to: last, dropBefore: cutoff)
        if created > 0 || dropped > 0 {
            logger.info("report partitions maintained", metadata: ["partitions.created": "\(created)", "partitions.dropped": "\(dropped)"])
        }
        // Cursors older than a day walk on over current data (docs/api.md).
        _ = try await PostgresQueryStore(database: database).pruneListSnapshots(before: now.addingTimeInterval(-day))
        // Sessions started over 31 days ago can no longer change (release-health.md).
        _ = try await PostgresSessionStore(database: database).pruneSessions(before: now.addingTimeInterval(-31 * day))
        // sentry-cli's chunks no assemble took (apple.md: kept at least an hour).
        _ = try await PostgresChunkUploadStore(database: database).sweepExpired(now: now)
        // The quota counts today only (data-protection.md); yesterday's row is kept for a day.
        try await database.client.query(QuotaSQL.prune(before: now.addingTimeInterval(-2 * day)), logger: logger)
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(3600))
                guard !Task.isCancelled else { return }
                do {
                    try await runOnce()
                } catch {
                    logger.warning("partition maintenance failed; retrying in an hour", metadata: ["error.message": "\(error)"])
                }
            }
        }
    }
}
