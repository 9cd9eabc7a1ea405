import Foundation
import PostgresNIO

/// The reads a window count adds up (``PostgresQueryStore/Reader/windowCounts(project:ids:window:filters:snapshot:)``):
/// one row per report, or per rollup row with its count, of the asked groups in the window.
///
/// The statement holds only the reads this count needs: the per-version, per-environment or
/// dimension rollups (by the filters' ``RollupLevel``), the pieces of the window that are not
/// empty, the pending reports' scan when the project has batches the aggregator has not folded
/// in this snapshot, and the subtraction of the reports committed after a cursor's snapshot
/// when there is one. PostgreSQL plans every piece of a statement at every call, even one whose
/// condition is a bound `false`: a read of `reports` costs the planning of its daily partitions
/// (about 2.5 ms for a statement holding every piece, against 0.3 ms for a release page's two
/// rollup reads), more than most counts take to run.
struct WindowCountReads: Sendable {
    var project: Int64
    /// The asked groups and the groups merged into them; nil for every group of the project.
    var members: [Int64]?
    var window: TimeWindow
    var filters: GroupFilters
    /// Whether the project has batches whose reports the rollups do not hold in this snapshot.
    var pending: Bool
    /// Count as of this `pg_snapshot`: the reports committed after it are subtracted.
    var snapshot: String?
    /// The time an edge at or after which holds only reports timestamped in the future
    /// (``TimeWindow/widenedToHours(now:)``).
    var now = Date()
}

extension TimeRange {
    /// A range of length zero (`from == to`, an empty piece of a ``TimeWindow/Plan``) holds nothing.
    var isEmpty: Bool { from >= to }
}

extension PostgresQuery.StringInterpolation {
    /// The `UNION ALL` of the reads of `r` as `(group_id, n)` rows (each read names its columns,
    /// since the first one names the union's); nothing when the window is empty.
    mutating func appendInterpolation(windowCountRows r: WindowCountReads) {
        let (project, members, f) = (r.project, r.members, r.filters)
        // Edges inside an hour read as the whole hour minus the reports outside the window, where
        // that is fewer raw reports; not under a snapshot (a cursor's later pages), whose
        // subtraction of later reports would then take those outside away twice.
        var window = r.window
        var outside: [TimeRange] = []
        if r.snapshot == nil, f.level != .reports { (window, outside) = r.window.widenedToHours(now: r.now) }
        var separator = ""
        if f.level == .versions {
            // Without report filters but a version, whole hours and days come from the per-version
            // rollups: a few rows per group and day instead of one per app, version, OS and environment.
            let sp = window.subtractivePlan
            let version = f.reports.versions.first ?? ""
            if !sp.days.isEmpty {
                appendLiteral("SELECT group_id, count AS n FROM group_version_daily WHERE app_version = ")
                appendInterpolation(version)
                appendLiteral(" AND ")
                appendInterpolation("day", in: sp.days)
                appendInterpolation(versionRollupGroups: members, project: project)
                separator = "\nUNION ALL\n"
            }
            let hours = [sp.head, sp.tail].filter { !$0.range.isEmpty }
            if let first = hours.first {
                appendLiteral(separator + "SELECT group_id, count * ")
                if hours.count == 2, sp.head.sign != sp.tail.sign {
                    appendLiteral("CASE WHEN ")
                    appendInterpolation("hour", in: sp.head.range)
                    appendLiteral(" THEN ")
                    appendInterpolation(sp.head.sign)
                    appendLiteral(" ELSE ")
                    appendInterpolation(sp.tail.sign)
                    appendLiteral(" END")
                } else {
                    appendInterpolation(first.sign)
                }
                appendLiteral(" AS n FROM group_version_hourly WHERE app_version = ")
                appendInterpolation(version)
                appendLiteral(" AND ")
                appendInterpolation("hour", inAny: hours.map(\.range))
                appendInterpolation(versionRollupGroups: members, project: project)
                separator = "\nUNION ALL\n"
            }
        } else {
            let plan = window.plan(for: f.level)
            if !plan.days.isEmpty, f.level == .environments {
                // `environment=` and at most a version: whole days from the per-environment rollup,
                // a row per group, environment and day instead of one per app, version and OS.
                appendLiteral(separator + "SELECT group_id, count AS n FROM group_environment_daily WHERE environment = ANY(")
                appendInterpolation(f.environments)
                appendLiteral("::text[]) AND app_version = ")
                appendInterpolation(f.reports.versions.first ?? "")
                appendLiteral(" AND ")
                appendInterpolation("day", in: plan.days)
                appendInterpolation(versionRollupGroups: members, project: project)
                separator = "\nUNION ALL\n"
            } else if !plan.days.isEmpty {
                appendLiteral(separator + "SELECT group_id, count AS n FROM group_daily WHERE project_id = ")
                appendInterpolation(project)
                appendLiteral(" AND ")
                appendInterpolation("day", in: plan.days)
                appendInterpolation(memberGroups: members)
                appendLiteral(" AND ")
                appendInterpolation(reportFilter: f)
                separator = "\nUNION ALL\n"
            }
            let hours = [plan.hoursHead, plan.hoursTail].filter { !$0.isEmpty }
            if !hours.isEmpty, f.level == .environments, f.reports.versions.isEmpty {
                // `environment=` alone: the edge hours per group and environment.
                appendLiteral(
                    separator + "SELECT m.group_id, e.count AS n FROM group_environment_hours m "
                        + "CROSS JOIN LATERAL crashguard_model_hours(m.hours) e WHERE m.environment = ANY(")
                appendInterpolation(f.environments)
                appendLiteral("::text[]) AND ")
                appendInterpolation(dayHoursIn: hours)
                appendInterpolation(versionRollupGroups: members, project: project)
                separator = "\nUNION ALL\n"
            } else if !hours.isEmpty {
                appendLiteral(separator + "SELECT group_id, ")
                appendInterpolation(rollupCount: f)
                appendLiteral(" AS n FROM group_hourly WHERE project_id = ")
                appendInterpolation(project)
                appendLiteral(" AND ")
                appendInterpolation("hour", inAny: hours)
                appendInterpolation(memberGroups: members)
                appendLiteral(" AND ")
                appendInterpolation(reportFilter: f)
                separator = "\nUNION ALL\n"
            }
        }
        // The sub-hour edges (or, for `context` terms, the whole window) from the reports; and
        // what the widened edges added, taken away again: every report there, folded or pending
        // (the pending read below adds the pending ones with the rest of the window).
        let plan = window.plan(for: f.level)
        let raw = [plan.rawHead, plan.rawTail].filter { !$0.isEmpty }
        for (ranges, n) in [(raw, "1"), (outside, "-1")] where !ranges.isEmpty {
            appendLiteral(separator + "SELECT group_id, \(n) AS n FROM reports WHERE project_id = ")
            appendInterpolation(project)
            appendLiteral(" AND ")
            appendInterpolation("ts", inAny: ranges)
            appendInterpolation(reportsOf: members, f)
            separator = "\nUNION ALL\n"
        }
        guard window.from < window.to else { return }
        if r.pending {
            // The reports of batches the rollups do not hold yet, outside the edges read above.
            appendLiteral(separator + "SELECT group_id, 1 AS n FROM reports WHERE project_id = ")
            appendInterpolation(project)
            appendLiteral(" AND xact IN (")
            appendInterpolation(pendingXactsOf: project)
            appendLiteral(")\n  AND ")
            appendInterpolation("ts", in: TimeRange(from: window.from, to: window.to))
            if !raw.isEmpty {
                appendLiteral(" AND NOT ")
                appendInterpolation("ts", inAny: raw)
            }
            appendInterpolation(reportsOf: members, f)
            separator = "\nUNION ALL\n"
        }
        if let snapshot = r.snapshot {
            appendLiteral(separator + "SELECT group_id, -1 AS n FROM reports WHERE project_id = ")
            appendInterpolation(project)
            appendLiteral(" AND xact >= pg_snapshot_xmin(")
            appendInterpolation(snapshot)
            appendLiteral("::pg_snapshot) AND NOT pg_visible_in_snapshot(xact, ")
            appendInterpolation(snapshot)
            appendLiteral("::pg_snapshot)\n  AND ")
            appendInterpolation("ts", in: TimeRange(from: window.from, to: window.to))
            appendInterpolation(reportsOf: members, f)
        }
    }

    /// The conditions of a read of `reports` besides its time and transactions: the groups
    /// and the report filters.
    fileprivate mutating func appendInterpolation(reportsOf members: [Int64]?, _ f: GroupFilters) {
        appendInterpolation(memberGroups: members)
        appendLiteral("\n  AND ")
        appendInterpolation(reportFilter: f, onReports: true)
    }

    /// ` AND group_id = ANY(members)` when the count is of some groups; nothing for all of them.
    fileprivate mutating func appendInterpolation(memberGroups members: [Int64]?) {
        guard let members else { return }
        appendLiteral(" AND group_id = ANY(")
        appendInterpolation(members)
        appendLiteral("::bigint[])")
    }

    /// The groups of a per-version or per-environment rollup read (those tables have no `project_id`): the
    /// members, or every group of the project.
    fileprivate mutating func appendInterpolation(versionRollupGroups members: [Int64]?, project: Int64) {
        guard members == nil else { return appendInterpolation(memberGroups: members) }
        appendLiteral(" AND group_id IN (SELECT id FROM crash_groups WHERE project_id = ")
        appendInterpolation(project)
        appendLiteral(")")
    }
}
