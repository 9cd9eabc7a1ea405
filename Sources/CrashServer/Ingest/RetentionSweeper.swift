import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Removes the reports each project keeps no longer (data-protection.md, "Retention"): those
/// whose client `timestamp` is older than the project's `retentionDays` (the server's
/// `CRASHGUARD_RETENTION_DAYS` where it has none), rollups included, through ERASURE's
/// ``ReportEraser`` so that every count, sketch and list is what a database that never received
/// them would answer, and a group left with no report disappears.
///
/// Runs once the schema is applied and every ``interval`` after (`CRASHGUARD_RETENTION_INTERVAL`,
/// an hour by default: well within the contract's 24 hours), in transactions of at most ``chunk`` reports, oldest first. Safe with several
/// servers: the eraser locks the groups first and counts only the reports it deleted, so two
/// sweepers never subtract a report twice.
struct RetentionSweeper: Service {
    let database: CrashDatabase
    /// `CRASHGUARD_RETENTION_DAYS`: the retention of projects without their own.
    let serverRetentionDays: Int
    /// `CRASHGUARD_RETENTION_INTERVAL`; zero: the sweeper does nothing.
    let interval: Duration
    let logger: Logger

    /// Reports erased per transaction.
    static var chunk: Int { 2000 }

    /// Erases every report past its project's retention at `now` (of `project` alone when given);
    /// returns how many. The cut-off is ``Retention/cutoff(now:)``, the one the queries hide
    /// reports by, so a report is erased exactly when no query shows it any more.
    @discardableResult
    func runOnce(now: Date = Date(), project only: Int64? = nil) async throws -> Int {
        var erased = 0
        for (project, days) in try await retentions(only: only) {
            let cutoff = Retention(days: days).cutoff(now: now)
            while true {
                let outcome = try await database.client.withTransactionEndingOnClose(logger: logger) { connection in
                    var keys: [ReportEraser.Key] = []
                    let rows = try await connection.query(
                        """
                        SELECT ts, id FROM reports WHERE project_id = \(project) AND ts < \(cutoff)
                        ORDER BY ts LIMIT \(Self.chunk)
                        """, logger: logger)
                    for try await (ts, id) in rows.decode((Date, UUID).self) { keys.append(ReportEraser.Key(ts: ts, id: id)) }
                    guard !keys.isEmpty else { return (ReportEraser.Outcome(reports: 0, groupsDeleted: []), 0) }
                    let outcome = try await ReportEraser(logger: logger).erase(project: project, keys: keys, on: connection)
                    return (outcome, keys.count)
                }
                erased += outcome.0.reports
                if outcome.1 < Self.chunk { break }
            }
        }
        if erased > 0 { logger.info("reports past retention removed", metadata: ["reports": "\(erased)"]) }
        return erased
    }

    /// The retention in force of each project (of `only` when given). The cut-off itself is
    /// computed in Swift, never by the database's interval arithmetic, so the sweeper and the
    /// queries agree to the second; each project's first chunk read is one probe of
    /// `reports_project_ts`.
    private func retentions(only: Int64?) async throws -> [(Int64, Int)] {
        var out: [(Int64, Int)] = []
        let rows = try await database.client.query(
            """
            SELECT p.id, COALESCE(s.retention_days, \(serverRetentionDays))::bigint FROM projects p
            LEFT JOIN project_settings s ON s.project_id = p.id
            WHERE \(only)::bigint IS NULL OR p.id = \(only)
            ORDER BY p.id
            """, logger: logger)
        for try await (project, days) in rows.decode((Int64, Int64).self) { out.append((project, Int(days))) }
        return out
    }

    func run() async throws {
        guard interval > .zero else { return await PollingService.idleUntilShutdown() }
        await PollingService.waitForSchema(database.schemaApplied)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await runOnce()
            } catch {
                logger.warning("retention sweep failed; retrying at the next", metadata: ["error.message": "\(String(reflecting: error))"])
            }
            await PollingService.sleep(for: interval)
        }
    }
}
