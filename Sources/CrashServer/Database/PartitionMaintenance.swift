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
        let created = try await database.ensurePartitions(from: first, to: last)
        let dropped = try await database.dropPartitions(before: cutoff)
        if created > 0 || dropped > 0 {
            logger.info("report partitions maintained", metadata: ["partitions.created": "\(created)", "partitions.dropped": "\(dropped)"])
        }
        // Cursors older than a day walk on over current data (docs/api.md).
        _ = try await database.pruneListSnapshots(before: now.addingTimeInterval(-day))
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
    /// Creates the daily partitions covering the UTC days of `from`...`to`.
    func ensurePartitions(from: Date, to: Date) async throws -> Int {
        let rows = try await client.query(
            "SELECT crashguard_ensure_partitions(\(Self.utcDay(from))::date, \(Self.utcDay(to))::date)", logger: logger)
        for try await count in rows.decode(Int.self) { return count }
        return 0
    }

    /// Drops the daily partitions (and idempotency rows) older than `before`'s UTC day.
    func dropPartitions(before: Date) async throws -> Int {
        let rows = try await client.query(
            "SELECT crashguard_drop_partitions_before(\(Self.utcDay(before))::date)", logger: logger)
        for try await count in rows.decode(Int.self) { return count }
        return 0
    }

    /// `YYYY-MM-DD` of the UTC day holding `date`.
    static func utcDay(_ date: Date) -> String {
        String(RFC3339.format(date).prefix(10))
    }
}
