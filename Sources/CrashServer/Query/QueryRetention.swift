import Foundation
import PostgresNIO

// Retention on the read side (data-protection.md, "Retention"): a report older than its
// project's `retentionDays` is returned by no query and counts nowhere from the moment it passes
// the cut-off, not only once ``RetentionSweeper`` has erased it. Every read of the crash data
// (the query API, the dashboard, `crash-server top`, a release's crash groups, triage answers)
// asks its reader for the cut-off once (``QueryReader/retainedSince(project:now:)``, in the
// same snapshot as the counts) and clamps its window to it; the lists of reports and versions
// and the first-seen times are cut at the same instant.

extension TimeWindow {
    /// The part of the window at or after `since`: empty (starting at `to`) when the whole
    /// window lies before it. Counting over it leaves out everything past retention.
    func retained(since: Date) -> TimeWindow { TimeWindow(from: min(max(from, since), to), to: to) }
}

extension PostgresQueryStore.Reader {
    /// The oldest report `timestamp` the project keeps at `now`: ``Retention/cutoff(now:)`` of
    /// its `retentionDays`, or of the server's when it has none. Read in the request's
    /// snapshot, so a `PATCH` that lowers the retention applies to every later read at once, on
    /// every replica.
    func retainedSince(project: Int64, now: Date) async throws -> Date {
        let rows = try await connection.query(
            "SELECT retention_days FROM project_settings WHERE project_id = \(project)", logger: logger)
        var days: Int32?
        for try await value in rows.decode(Int32?.self) { days = value }
        return Retention(days: days.map(Int.init) ?? database.serverRetentionDays).cutoff(now: now)
    }

    /// The time of each group's oldest report at or after `since` (in `environments` when
    /// any), with the groups merged into it (one index probe of `reports_group_ts` per group and
    /// member); groups with none are left out.
    func firstSeen(ids: [Int64], since: Date, environments: [String]) async throws -> [Int64: Date] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT o.owner, min(r.ts) FROM \(owners: ids) o CROSS JOIN LATERAL (
                SELECT ts FROM reports WHERE group_id = o.member AND ts >= \(since) AND \(environmentFilter: environments)
                ORDER BY ts LIMIT 1
            ) r GROUP BY o.owner
            """, logger: logger)
        var out: [Int64: Date] = [:]
        for try await (id, first) in rows.decode((Int64, Date).self) { out[id] = first }
        return out
    }
}
