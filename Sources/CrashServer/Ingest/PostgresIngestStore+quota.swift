import CrashWire
import Foundation
import PostgresNIO

/// The daily quota inside the group-commit transaction (data-protection.md, "Daily quota").
///
/// Only a batch that holds a request with a ``QuotaClaim`` pays anything: its projects'
/// counter rows of the UTC day are locked (created on the day's first request, from the
/// reports already received that day), the claimed reports that are already in the ledger are
/// found (a statement after the lock, so it sees every report that a transaction holding the
/// lock before committed: two replicas never both count one report, nor both fit the last
/// place), then each request in batch order either fits whole (its new reports are added to the
/// counter) or is refused whole (``QuotaClaim/refuse(remaining:)``) and leaves the batch.
/// Three statements, in this transaction, before the ledger's: a refused request stores
/// nothing, and a transaction that rolls back counts nothing.
extension PostgresIngestStore {
    /// `items` without those of the requests the quota refuses.
    func applyQuotas(_ items: [IngestItem], now: Date, _ connection: PostgresConnection) async throws -> [IngestItem] {
        guard items.contains(where: { $0.quota != nil }) else { return items }
        // The requests under a quota, in batch order, with their items.
        var order: [ObjectIdentifier] = []
        var requests: [ObjectIdentifier: (claim: QuotaClaim, project: Int64, items: [IngestItem])] = [:]
        for item in items {
            guard let claim = item.quota else { continue }
            let id = ObjectIdentifier(claim)
            if requests[id] == nil {
                claim.reset()
                order.append(id)
                requests[id] = (claim, item.projectID, [])
            }
            requests[id]?.items.append(item)
        }
        let day = TimeWindow.floor(now, TimeWindow.day)
        let projects = Set(requests.values.map(\.project)).sorted()
        var used: [Int64: Int] = [:]
        for try await (project, count) in try await connection.query(
            QuotaSQL.lock(projects: projects, day: day), logger: logger
        ).decode((Int64, Int64).self) {
            used[project] = Int(count)
        }
        let claimed = requests.values.flatMap(\.items)
        var duplicates = Set<ReportKey>()
        for try await (project, id) in try await connection.query(
            QuotaSQL.inLedger(projects: claimed.map(\.projectID), ids: claimed.map(\.report.id)), logger: logger
        ).decode((Int64, UUID).self) {
            duplicates.insert(ReportKey(project: project, id: id))
        }
        var refused = Set<ObjectIdentifier>()
        var changed = Set<Int64>()
        for id in order {
            guard let request = requests[id] else { continue }
            let new = request.items.count { !duplicates.contains($0.key) }
            let left = request.claim.limit - used[request.project, default: 0]
            if new == 0 || new <= left {
                guard new > 0 else { continue }
                used[request.project, default: 0] += new
                changed.insert(request.project)
            } else {
                request.claim.refuse(remaining: left)
                refused.insert(id)
            }
        }
        if !changed.isEmpty {
            let rows = changed.sorted()
            try await connection.query(
                QuotaSQL.setUsed(projects: rows, used: rows.map { Int64(used[$0] ?? 0) }, day: day), logger: logger)
        }
        guard !refused.isEmpty else { return items }
        return items.filter { item in item.quota.map { !refused.contains(ObjectIdentifier($0)) } ?? true }
    }
}

/// The quota's statements (``PostgresIngestStore/applyQuotas(_:now:_:)``) and its reading for
/// the settings' `quotaUsedToday`.
enum QuotaSQL {
    /// Creates the projects' rows of `day` when missing (from the reports received since `day`,
    /// erased ones included, so a quota set during the day counts the day whole) and locks them
    /// in project order. Rows `(project, used)`.
    static func lock(projects: [Int64], day: Date) -> PostgresQuery {
        let since = day.addingTimeInterval(-31 * TimeWindow.day)
        return """
            INSERT INTO project_quota_days AS q (project_id, day, used)
            SELECT p, \(day),
                   CASE WHEN EXISTS (SELECT 1 FROM project_quota_days d WHERE d.project_id = p AND d.day = \(day)) THEN 0
                   ELSE (SELECT count(*) FROM reports r WHERE r.project_id = p AND r.ts >= \(since) AND r.received_at >= \(day))
                        + COALESCE((SELECT e.reports FROM project_erased_days e WHERE e.project_id = p AND e.day = \(day)), 0) END
            FROM unnest(\(projects)::bigint[]) AS p ORDER BY p
            ON CONFLICT (project_id, day) DO UPDATE SET used = q.used
            RETURNING q.project_id, q.used
            """
    }

    /// The `(project, id)` pairs already in the ledger.
    static func inLedger(projects: [Int64], ids: [UUID]) -> PostgresQuery {
        """
        SELECT r.project_id, r.id FROM report_ids r
        JOIN unnest(\(projects)::bigint[], \(ids)::uuid[]) AS x(p, id) ON r.project_id = x.p AND r.id = x.id
        """
    }

    static func setUsed(projects: [Int64], used: [Int64], day: Date) -> PostgresQuery {
        """
        UPDATE project_quota_days q SET used = x.used
        FROM unnest(\(projects)::bigint[], \(used)::bigint[]) AS x(p, used)
        WHERE q.project_id = x.p AND q.day = \(day)
        """
    }

    /// Deletes the rows (counters and erased reports) of days before `before`.
    static func prune(before: Date) -> PostgresQuery {
        """
        WITH erased AS (DELETE FROM project_erased_days WHERE day < \(before))
        DELETE FROM project_quota_days WHERE day < \(before)
        """
    }

    /// Adds `reports` erased reports, received on `day` (a UTC midnight), to `project`'s
    /// `project_erased_days` (``ReportEraser``, in the transaction that erases them).
    static func addErased(project: Int64, day: Date, reports: Int64) -> PostgresQuery {
        """
        INSERT INTO project_erased_days AS e (project_id, day, reports) VALUES (\(project), \(day), \(reports))
        ON CONFLICT (project_id, day) DO UPDATE SET reports = e.reports + excluded.reports
        """
    }

    /// Reports `project` stored since the UTC midnight before `now`, erased ones included: the
    /// reports received since and those of them erased since (`project_erased_days`), or its
    /// counter row when more (kept while a quota is set, it counts what it let in).
    static func usedToday(project: Int64, now: Date) -> PostgresQuery {
        let day = TimeWindow.floor(now, TimeWindow.day)
        let since = day.addingTimeInterval(-31 * TimeWindow.day)
        return """
            SELECT GREATEST(
                COALESCE((SELECT used FROM project_quota_days WHERE project_id = \(project) AND day = \(day)), 0),
                (SELECT count(*) FROM reports WHERE project_id = \(project) AND ts >= \(since) AND received_at >= \(day))
                + COALESCE((SELECT reports FROM project_erased_days WHERE project_id = \(project) AND day = \(day)), 0))::bigint
            """
    }
}
