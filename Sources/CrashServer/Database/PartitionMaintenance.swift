import CrashWire
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Keeps daily partitions of `reports` ahead of time and drops those past retention; prunes
/// the list snapshots of cursors older than a day.
///
/// Runs once before the server accepts traffic (see `buildApplication`) and hourly after.
struct PartitionMaintenance: Service {
    let database: CrashDatabase
    let retentionDays: Int
    let logger: Logger

    /// Ensures partitions from 31 days back to 3 days ahead; drops those past retention.
    func runOnce(now: Date = Date()) async throws {
        let day = 86_400.0
        let first = now.addingTimeInterval(-31 * day)
        let last = now.addingTimeInterval(3 * day)
        let cutoff = now.addingTimeInterval(-Double(retentionDays) * day)
        let (created, dropped) = try await database.maintainPartitions(from: first, to: last, dropBefore: cutoff)
        if created > 0 || dropped > 0 {
            logger.info("report partitions maintained", metadata: ["partitions.created": "\(created)", "partitions.dropped": "\(dropped)"])
        }
        // Cursors older than a day walk on over current data (docs/api.md).
        _ = try await PostgresQueryStore(database: database).pruneListSnapshots(before: now.addingTimeInterval(-day))
        // Sessions started over 31 days ago can no longer change (release-health.md).
        _ = try await PostgresSessionStore(database: database).pruneSessions(before: now.addingTimeInterval(-31 * day))
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

extension CrashDatabase {
    /// The advisory lock that serializes partition maintenance across replicas.
    static let partitionLockID: Int64 = 0x6372_6173_6870_6172  // "crashpar"

    /// Creates the daily partitions covering the UTC days of `from`...`to` and drops those
    /// (and their idempotency rows) older than `dropBefore`'s UTC day, in one transaction
    /// under an advisory lock: replicas that run it at the same time take turns, and the
    /// second finds nothing left to do.
    func maintainPartitions(from: Date, to: Date, dropBefore: Date) async throws -> (created: Int, dropped: Int) {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.partitionLockID))", logger: logger)
            var created = 0
            var dropped = 0
            let made = try await connection.query(
                "SELECT crashguard_ensure_partitions(\(Self.utcDay(from))::date, \(Self.utcDay(to))::date)", logger: logger)
            for try await count in made.decode(Int.self) { created = count }
            let gone = try await connection.query(
                "SELECT crashguard_drop_partitions_before(\(Self.utcDay(dropBefore))::date)", logger: logger)
            for try await count in gone.decode(Int.self) { dropped = count }
            return (created, dropped)
        }
    }

    /// `YYYY-MM-DD` of the UTC day holding `date`.
    static func utcDay(_ date: Date) -> String {
        String(RFC3339.format(date).prefix(10))
    }
}
