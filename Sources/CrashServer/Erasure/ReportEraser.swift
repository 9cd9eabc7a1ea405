import CrashGrouping
import CrashWire
import Foundation
import Logging
import PostgresNIO

/// Removes stored reports as if they had never been sent (data-protection.md, "Erasure"), in
/// the caller's transaction: the reports, their ids in the ingest ledger, and their share of
/// every rollup (schema.sql's `crashguard_rollup_*` tables), so that every query answers what
/// a database that never received them would.
///
/// - Counts (`group_hourly`, `group_daily`, `group_environment_model_daily`, `project_hourly`,
///   `project_environment_hourly`, `group_environment_hours`, `group_facets`,
///   `group_version_hourly/daily`, `group_environment_daily`, `crash_groups.report_count`) are
///   subtracted, the erased reports' own share, key by key; a row left at 0 is deleted.
/// - What a subtraction cannot give back is recomputed from the reports that remain: a group's
///   `first_seen`, `last_seen` and `fatal`, a facet's first and last time (only where an erased
///   report was at the edge) and the device sketch of every hour and day bucket an erased
///   report with a device id was in (``SketchKey``): in the same call, or, for a caller that
///   erases a long list chunk by chunk (``PostgresDeletionStore``), once at the end
///   (``Sketches/deferred``, ``rebuildSketches(project:_:on:)``), so that a bucket many chunks
///   touch is rebuilt once.
/// - The erased reports received since the last UTC midnight are added to the project's
///   `project_erased_days`: `quotaUsedToday` keeps counting them (``QuotaSQL/usedToday(project:now:)``).
/// - A group left with no report (and no group merged into it) is deleted with its rows; a later
///   report of its signature makes a new group. A group whose title is the title of one of its
///   erased reports takes the kind, title and normalized reason of its oldest remaining report.
///
/// The rollup aggregator's lock is taken first (``PostgresRollupStore/lock(_:logger:)``, held to
/// the caller's commit): no fold runs meanwhile, and the project's pending rollup facts are
/// folded here, after the reports are deleted and before their share is subtracted. A report
/// the deletion saw was committed before it, so its facts (committed with it) are among those
/// folded: its share is in the rollups when it is subtracted, and no later fold adds it again.
/// Then the groups are locked (`FOR UPDATE`, in `(project_id, signature)` order, the order the
/// ingest transaction locks them in), so no ingest changes their rows until the caller commits.
struct ReportEraser: Sendable {
    let logger: Logger

    /// A stored report: its client timestamp (the partition key) and id.
    struct Key: Hashable, Sendable {
        var ts: Date
        var id: UUID
    }

    /// A device sketch's bucket: the `group_version_hourly` row (`daily`: `group_version_daily`)
    /// of a group, a version ('' for all of them) and the hour (day) that starts the bucket. A
    /// daily bucket of all versions also stands for every `group_environment_daily` row of its
    /// group and day, whose sketches are rebuilt with it.
    struct SketchKey: Hashable, Sendable {
        var daily: Bool
        var group: Int64
        var version: String
        var bucket: Date
    }

    /// When ``erase(project:keys:sketches:on:)`` rebuilds the device sketches of the buckets it
    /// took device ids from.
    enum Sketches: Sendable {
        /// In the same call, from the reports that remain.
        case now
        /// Not at all: the outcome lists them (``Outcome/sketches``), for the caller to rebuild
        /// with ``rebuildSketches(project:_:on:)`` once the last report of theirs is erased.
        /// Until then the sketches still count the erased devices.
        case deferred
    }

    struct Outcome: Sendable, Equatable {
        /// Reports erased (keys whose report was no longer stored count nowhere).
        var reports: Int
        /// Groups deleted because no report was left in them.
        var groupsDeleted: [Int64]
        /// With ``Sketches/deferred``: the sketches to rebuild.
        var sketches: [SketchKey] = []
    }

    /// Erases the reports of `project` at `keys` (a few thousand at most per call) on
    /// `connection`, which must be in a transaction.
    func erase(project: Int64, keys: [Key], sketches: Sketches = .now, on connection: PostgresConnection) async throws -> Outcome {
        guard !keys.isEmpty else { return Outcome(reports: 0, groupsDeleted: []) }
        let (times, ids) = (keys.map(\.ts), keys.map(\.id))
        try await PostgresRollupStore.lock(connection, logger: logger)
        _ = try await connection.query(
            """
            SELECT g.id FROM crash_groups g
            WHERE g.project_id = \(project) AND g.id IN (
                SELECT r.group_id FROM unnest(\(times)::timestamptz[], \(ids)::uuid[]) AS k(ts, id)
                JOIN reports r ON r.project_id = \(project) AND r.ts = k.ts AND r.id = k.id)
            ORDER BY g.project_id, g.signature FOR UPDATE OF g
            """, logger: logger
        ).collect()
        let rows = try await connection.query(
            """
            DELETE FROM reports r USING unnest(\(times)::timestamptz[], \(ids)::uuid[]) AS k(ts, id)
            WHERE r.project_id = \(project) AND r.ts = k.ts AND r.id = k.id
            RETURNING r.id, r.group_id, r.ts, r.kind, r.reason, COALESCE(r.fatal, false), r.app_id, r.app_version,
                      COALESCE(r.os, ''), COALESCE(r.model, ''), r.environment, COALESCE(r.device_id, ''), r.received_at
            """, logger: logger)
        var erased: [Erased] = []
        let today = TimeWindow.floor(Date(), TimeWindow.day)
        var receivedToday: Int64 = 0
        for try await row in rows.decode(
            (UUID, Int64, Date, String, String, Bool, String, String, String, String, String, String, Date).self)
        {
            erased.append(
                Erased(
                    id: row.0, group: row.1, ts: row.2, kind: row.3, reason: row.4, fatal: row.5, app: row.6, version: row.7,
                    os: row.8, model: row.9, environment: row.10, device: row.11))
            if row.12 >= today { receivedToday += 1 }
        }
        guard !erased.isEmpty else { return Outcome(reports: 0, groupsDeleted: []) }
        try await RollupFold(logger: logger).foldPending(project: project, on: connection)
        let deltas = Deltas(erased)
        try await connection.query(
            "DELETE FROM report_ids WHERE project_id = \(project) AND id = ANY(\(erased.map(\.id)))", logger: logger)
        if receivedToday > 0 {
            try await connection.query(QuotaSQL.addErased(project: project, day: today, reports: receivedToday), logger: logger)
        }
        try await connection.query(ErasureSQL.subtract(project: project, deltas), logger: logger)
        try await connection.query(ErasureSQL.recompute(project: project, deltas), logger: logger)
        let touched = deltas.sketches
        if sketches == .now { try await rebuild(touched, connection) }
        let deleted = try await deleteEmptyGroups(Array(deltas.groups.keys), connection)
        try await retitle(deltas, erased, deleted: Set(deleted), connection)
        return Outcome(reports: erased.count, groupsDeleted: deleted, sketches: sketches == .deferred ? touched : [])
    }

    /// Rebuilds the device sketches at `keys` from the reports `project` stores now, in the
    /// caller's transaction: under the aggregator's lock with the project's pending facts folded
    /// first, as ``erase(project:keys:sketches:on:)`` does. A bucket whose row is gone (no report
    /// left in it) is skipped.
    func rebuildSketches(project: Int64, _ keys: [SketchKey], on connection: PostgresConnection) async throws {
        guard !keys.isEmpty else { return }
        try await PostgresRollupStore.lock(connection, logger: logger)
        try await RollupFold(logger: logger).foldPending(project: project, on: connection)
        try await rebuild(keys, connection)
    }

    private func rebuild(_ keys: [SketchKey], _ connection: PostgresConnection) async throws {
        guard !keys.isEmpty else { return }
        try await connection.query(ErasureSQL.rebuildSketches(keys), logger: logger)
    }

    /// Deletes the groups among `groups` left with no report and nothing merged into them, then
    /// the groups they were merged into that this leaves empty in turn (merges are one level
    /// deep), with their rollup rows.
    private func deleteEmptyGroups(_ groups: [Int64], _ connection: PostgresConnection) async throws -> [Int64] {
        var deleted: [Int64] = []
        var candidates = groups.sorted()
        while !candidates.isEmpty {
            let rows = try await connection.query(ErasureSQL.deleteGroups(candidates), logger: logger)
            var targets = Set<Int64>()
            for try await (id, into) in rows.decode((Int64, Int64?).self) {
                deleted.append(id)
                if let into { targets.insert(into) }
            }
            candidates = targets.subtracting(deleted).sorted()
        }
        return deleted.sorted()
    }

    /// Gives each remaining group whose title is the title of one of its erased reports the
    /// kind, title and normalized reason of its oldest remaining report: one read of every such
    /// group's oldest report, one write of those that change.
    private func retitle(_ deltas: Deltas, _ erased: [Erased], deleted: Set<Int64>, _ connection: PostgresConnection) async throws {
        let touched = deltas.groups.keys.filter { !deleted.contains($0) }.sorted()
        guard !touched.isEmpty else { return }
        var groups: [Int64: (kind: String, title: String, normalized: String, version: GroupingVersion)] = [:]
        let rows = try await connection.query(
            "SELECT id, kind, title, normalized_reason, grouping_version FROM crash_groups WHERE id = ANY(\(touched))", logger: logger)
        for try await (id, kind, title, normalized, version) in rows.decode((Int64, String, String, String, String).self) {
            groups[id] = (kind, title, normalized, GroupingVersion(rawValue: version) ?? .v1)
        }
        var retitled = Set<Int64>()
        var seen = Set<[String]>()
        for report in erased where !retitled.contains(report.group) {
            guard let group = groups[report.group], seen.insert([String(report.group), report.kind, report.reason]).inserted,
                Erased.title(kind: report.kind, reason: report.reason, group.version).title == group.title
            else { continue }
            retitled.insert(report.group)
        }
        guard !retitled.isEmpty else { return }
        let oldest = try await connection.query(
            """
            SELECT g.id, r.kind, r.reason FROM unnest(\(retitled.sorted())::bigint[]) AS g(id)
            CROSS JOIN LATERAL (SELECT kind, reason FROM reports WHERE group_id = g.id ORDER BY ts, id LIMIT 1) r
            """, logger: logger)
        var changes: [(id: Int64, kind: String, title: String, normalized: String)] = []
        for try await (id, kind, reason) in oldest.decode((Int64, String, String).self) {
            guard let group = groups[id] else { continue }
            let signature = Erased.title(kind: kind, reason: reason, group.version)
            if (kind, signature.title, signature.normalizedReason) != (group.kind, group.title, group.normalized) {
                changes.append((id, kind, signature.title, signature.normalizedReason))
            }
        }
        guard !changes.isEmpty else { return }
        try await connection.query(
            """
            UPDATE crash_groups t SET kind = x.kind, title = x.title, normalized_reason = x.normalized
            FROM unnest(\(changes.map(\.id))::bigint[], \(changes.map(\.kind))::text[], \(changes.map(\.title))::text[],
                        \(changes.map(\.normalized))::text[]) AS x(id, kind, title, normalized)
            WHERE t.id = x.id
            """, logger: logger)
    }
}

/// One erased report, as its `reports` row held it (what the rollups and the title need).
struct Erased {
    var id: UUID, group: Int64, ts: Date, kind: String, reason: String, fatal: Bool
    var app: String, version: String, os: String, model: String, environment: String, device: String

    /// The title and normalized reason a report of `kind` and `reason` gives its group: they
    /// depend on the reason alone (``Grouping``), not on the stack or fingerprint.
    static func title(kind: String, reason: String, _ version: GroupingVersion) -> (title: String, normalizedReason: String) {
        let signature = Grouping.signature(
            kind: ReportKind(rawValue: kind) ?? .custom, reason: reason, stack: nil, fingerprint: nil, version: version)
        return (signature.title, signature.normalizedReason)
    }
}

/// The erased reports' share of each rollup row, key by key, and what the recomputation needs.
struct Deltas {
    struct Hourly: Hashable { var group: Int64, hour: Date, app: String, version: String, os: String, environment: String }
    struct Daily: Hashable { var group: Int64, day: Date, app: String, version: String, os: String, environment: String }
    struct Model: Hashable { var group: Int64, environment: String, day: Date, model: String }
    struct Project: Hashable { var hour: Date, kind: String, version: String, environment: String }
    struct ProjectEnvironment: Hashable { var hour: Date, environment: String }
    struct GroupEnvironment: Hashable { var group: Int64, environment: String, day: Date }
    struct Facet: Hashable { var group: Int64, facet: String, value: String }
    struct Version: Hashable { var group: Int64, version: String, bucket: Date }
    struct EnvironmentDay: Hashable { var group: Int64, environment: String, version: String, day: Date }
    /// Count, and the earliest and latest time.
    struct Span {
        var n: Int64 = 0, first = Date.distantFuture, last = Date.distantPast
        mutating func add(_ t: Date) { (n, first, last) = (n + 1, min(first, t), max(last, t)) }
    }

    var hourly: [Hourly: (n: Int64, fatal: Int64)] = [:]
    var daily: [Daily: Int64] = [:]
    var models: [Model: ModelHours] = [:]
    var projects: [Project: Int64] = [:]
    var projectEnvironments: [ProjectEnvironment: (n: Int64, fatal: Int64)] = [:]
    var groupEnvironments: [GroupEnvironment: ModelHours] = [:]
    var facets: [Facet: Span] = [:]
    /// Count, and whether an erased report of the bucket had a device id (its sketch is rebuilt).
    var versionHourly: [Version: (n: Int64, devices: Bool)] = [:]
    var versionDaily: [Version: (n: Int64, devices: Bool)] = [:]
    var environmentDaily: [EnvironmentDay: Int64] = [:]
    /// Per group: count, times, and whether an erased report was fatal.
    var groups: [Int64: (span: Span, fatal: Bool)] = [:]

    init(_ erased: [Erased]) {
        for r in erased {
            let hour = TimeWindow.floor(r.ts, TimeWindow.hour), day = TimeWindow.floor(r.ts, TimeWindow.day)
            let fatal: Int64 = r.fatal ? 1 : 0
            let key = Hourly(group: r.group, hour: hour, app: r.app, version: r.version, os: r.os, environment: r.environment)
            let entry = hourly[key] ?? (0, 0)
            hourly[key] = (entry.n + 1, entry.fatal + fatal)
            daily[Daily(group: r.group, day: day, app: r.app, version: r.version, os: r.os, environment: r.environment), default: 0] += 1
            models[Model(group: r.group, environment: r.environment, day: day, model: r.model), default: ModelHours()].add(r.ts, day: day)
            projects[Project(hour: hour, kind: r.kind, version: r.version, environment: r.environment), default: 0] += 1
            let totals = ProjectEnvironment(hour: hour, environment: r.environment)
            projectEnvironments[totals, default: (0, 0)].n += 1
            projectEnvironments[totals, default: (0, 0)].fatal += fatal
            for (facet, value) in [("app", r.app), ("version", r.version), ("os", r.os), ("environment", r.environment)] {
                facets[Facet(group: r.group, facet: facet, value: value), default: Span()].add(r.ts)
            }
            for version in ["", r.version] {
                Self.add(&versionHourly[Version(group: r.group, version: version, bucket: hour), default: (0, false)], r.device)
                Self.add(&versionDaily[Version(group: r.group, version: version, bucket: day), default: (0, false)], r.device)
                environmentDaily[EnvironmentDay(group: r.group, environment: r.environment, version: version, day: day), default: 0] += 1
            }
            groups[r.group, default: (Span(), false)].span.add(r.ts)
            if r.fatal { groups[r.group]?.fatal = true }
        }
        // Each group's hours per environment and day, from the hourly keys (as the fold derives them).
        for (key, value) in hourly {
            let day = TimeWindow.floor(key.hour, TimeWindow.day)
            groupEnvironments[GroupEnvironment(group: key.group, environment: key.environment, day: day), default: ModelHours()]
                .add(key.hour, day: day, count: value.n)
        }
    }

    /// The device sketches to rebuild: the buckets in which an erased report had a device id.
    var sketches: [ReportEraser.SketchKey] {
        let hourly = versionHourly.filter(\.value.devices).keys.map {
            ReportEraser.SketchKey(daily: false, group: $0.group, version: $0.version, bucket: $0.bucket)
        }
        let daily = versionDaily.filter(\.value.devices).keys.map {
            ReportEraser.SketchKey(daily: true, group: $0.group, version: $0.version, bucket: $0.bucket)
        }
        return hourly + daily
    }

    private static func add(_ entry: inout (n: Int64, devices: Bool), _ device: String) {
        entry.n += 1
        if !device.isEmpty { entry.devices = true }
    }
}

/// The statements of ``ReportEraser``.
enum ErasureSQL {
    /// Subtracts the erased reports' share from every count, in one statement (each part a
    /// table of its own): a row whose whole count was erased is deleted, the others are
    /// decreased; both find their rows by key, so the cost follows the erased reports, not the
    /// size of their groups.
    static func subtract(project p: Int64, _ d: Deltas) -> PostgresQuery {
        let h = Array(d.hourly), dd = Array(d.daily), m = Array(d.models), ph = Array(d.projects)
        let pe = Array(d.projectEnvironments), ge = Array(d.groupEnvironments)
        let f = Array(d.facets)
        let vh = Array(d.versionHourly), vd = Array(d.versionDaily), ed = Array(d.environmentDaily), g = Array(d.groups)
        let hourly = "t.project_id = x.p AND t.hour = x.hour AND t.group_id = x.g AND t.app_id = x.app AND t.app_version = x.version"
        let daily = "t.project_id = x.p AND t.day = x.day AND t.group_id = x.g AND t.app_id = x.app AND t.app_version = x.version"
        return """
            WITH h AS (
                SELECT x.*, \(p)::bigint AS p
                FROM unnest(\(h.map(\.key.group)), \(h.map(\.key.hour)), \(h.map(\.key.app)), \(h.map(\.key.version)),
                            \(h.map(\.key.os)), \(h.map(\.key.environment)), \(h.map(\.value.n)), \(h.map(\.value.fatal)))
                    AS x(g, hour, app, version, os, env, n, f)
            ), \(unescaped: subtracting("hourly", from: "h", into: "group_hourly", where: hourly + " AND t.os = x.os AND t.environment = x.env",
                                         set: "count = t.count - x.n, fatal_count = t.fatal_count - x.f")),
            d AS (
                SELECT x.*, \(p)::bigint AS p
                FROM unnest(\(dd.map(\.key.group)), \(dd.map(\.key.day)), \(dd.map(\.key.app)), \(dd.map(\.key.version)),
                            \(dd.map(\.key.os)), \(dd.map(\.key.environment)), \(dd.map(\.value)))
                    AS x(g, day, app, version, os, env, n)
            ), \(unescaped: subtracting("daily", from: "d", into: "group_daily", where: daily + " AND t.os = x.os AND t.environment = x.env")),
            m AS (
                SELECT * FROM unnest(\(m.map(\.key.group)), \(m.map(\.key.environment)), \(m.map(\.key.day)), \(m.map(\.key.model)),
                                     \(m.map(\.value.count)), \(m.map(\.value.encoded))) AS x(g, env, day, model, n, hours)
            ), \(unescaped: subtracting("models", from: "m", into: "group_environment_model_daily",
                                         where: "t.group_id = x.g AND t.environment = x.env AND t.day = x.day AND t.model = x.model",
                                         set: "count = t.count - x.n, hours = crashguard_model_hours_add(t.hours, x.hours, -1)")),
            ph AS (
                SELECT x.*, \(p)::bigint AS p
                FROM unnest(\(ph.map(\.key.hour)), \(ph.map(\.key.kind)), \(ph.map(\.key.version)), \(ph.map(\.key.environment)),
                            \(ph.map(\.value)))
                    AS x(hour, kind, version, env, n)
            ), \(unescaped: subtracting("projects", from: "ph", into: "project_hourly",
                                         where: "t.project_id = x.p AND t.hour = x.hour AND t.kind = x.kind AND t.app_version = x.version AND t.environment = x.env")),
            pe AS (
                SELECT x.*, \(p)::bigint AS p
                FROM unnest(\(pe.map(\.key.hour)), \(pe.map(\.key.environment)), \(pe.map(\.value.n)), \(pe.map(\.value.fatal)))
                    AS x(hour, env, n, f)
            ), \(unescaped: subtracting("totals", from: "pe", into: "project_environment_hourly",
                                         where: "t.project_id = x.p AND t.hour = x.hour AND t.environment = x.env",
                                         set: "count = t.count - x.n, fatal_count = t.fatal_count - x.f")),
            ge AS (
                SELECT * FROM unnest(\(ge.map(\.key.group)), \(ge.map(\.key.environment)), \(ge.map(\.key.day)), \(ge.map(\.value.count)),
                                     \(ge.map(\.value.encoded))) AS x(g, env, day, n, hours)
            ), \(unescaped: subtracting("group_environments", from: "ge", into: "group_environment_hours",
                                         where: "t.group_id = x.g AND t.environment = x.env AND t.day = x.day",
                                         set: "count = t.count - x.n, hours = crashguard_model_hours_add(t.hours, x.hours, -1)")),
            f AS (
                SELECT * FROM unnest(\(f.map(\.key.group)), \(f.map(\.key.facet)), \(f.map(\.key.value)), \(f.map(\.value.n)))
                    AS x(g, facet, value, n)
            ), \(unescaped: subtracting("facets", from: "f", into: "group_facets", where: "t.group_id = x.g AND t.facet = x.facet AND t.value = x.value")),
            vh AS (
                SELECT * FROM unnest(\(vh.map(\.key.group)), \(vh.map(\.key.version)), \(vh.map(\.key.bucket)), \(vh.map(\.value.n)))
                    AS x(g, v, b, n)
            ), \(unescaped: subtracting("version_hourly", from: "vh", into: "group_version_hourly", where: "t.group_id = x.g AND t.app_version = x.v AND t.hour = x.b")),
            vd AS (
                SELECT * FROM unnest(\(vd.map(\.key.group)), \(vd.map(\.key.version)), \(vd.map(\.key.bucket)), \(vd.map(\.value.n)))
                    AS x(g, v, b, n)
            ), \(unescaped: subtracting("version_daily", from: "vd", into: "group_version_daily", where: "t.group_id = x.g AND t.app_version = x.v AND t.day = x.b")),
            ed AS (
                SELECT * FROM unnest(\(ed.map(\.key.group)), \(ed.map(\.key.environment)), \(ed.map(\.key.version)), \(ed.map(\.key.day)),
                                     \(ed.map(\.value)))
                    AS x(g, e, v, b, n)
            ), \(unescaped: subtracting("environment_daily", from: "ed", into: "group_environment_daily",
                                         where: "t.group_id = x.g AND t.environment = x.e AND t.app_version = x.v AND t.day = x.b"))
            UPDATE crash_groups t SET report_count = t.report_count - x.n
            FROM unnest(\(g.map(\.key)), \(g.map(\.value.span.n))) AS x(g, n) WHERE t.id = x.g
            """
    }

    /// Two parts of ``subtract(project:_:)``'s statement (fixed text, no values): the rows of
    /// `table` that `match` finds for the key rows of `source` (as `x`, with their erased count
    /// `n`) are decreased by `set` when some of their count stays, deleted when none does.
    private static func subtracting(
        _ name: String, from source: String, into table: String, where match: String, set: String = "count = t.count - x.n"
    ) -> String {
        """
        \(name) AS (
            UPDATE \(table) t SET \(set) FROM \(source) x WHERE \(match) AND t.count > x.n
        ), \(name)_gone AS (
            DELETE FROM \(table) t USING \(source) x WHERE \(match) AND t.count <= x.n
        )
        """
    }

    /// After ``subtract(project:_:)``: recomputes from the remaining reports the group and facet
    /// times and `fatal`, where an erased report was at their edge.
    static func recompute(project p: Int64, _ d: Deltas) -> PostgresQuery {
        let g = Array(d.groups), f = Array(d.facets)
        return """
            WITH facet_times AS (
                UPDATE group_facets t SET
                    first_seen = CASE WHEN x.lo <= t.first_seen THEN COALESCE((
                        SELECT min(r.ts) FROM reports r WHERE r.group_id = t.group_id AND CASE t.facet WHEN 'app' THEN r.app_id
                            WHEN 'version' THEN r.app_version WHEN 'os' THEN COALESCE(r.os, '') ELSE r.environment END = t.value
                        ), t.first_seen) ELSE t.first_seen END,
                    last_seen = CASE WHEN x.hi >= t.last_seen THEN COALESCE((
                        SELECT max(r.ts) FROM reports r WHERE r.group_id = t.group_id AND CASE t.facet WHEN 'app' THEN r.app_id
                            WHEN 'version' THEN r.app_version WHEN 'os' THEN COALESCE(r.os, '') ELSE r.environment END = t.value
                        ), t.last_seen) ELSE t.last_seen END
                FROM unnest(\(f.map(\.key.group)), \(f.map(\.key.facet)), \(f.map(\.key.value)), \(f.map(\.value.first)),
                            \(f.map(\.value.last))) AS x(g, facet, value, lo, hi)
                WHERE t.group_id = x.g AND t.facet = x.facet AND t.value = x.value AND t.count > 0
                  AND (x.lo <= t.first_seen OR x.hi >= t.last_seen)
            )
            UPDATE crash_groups t SET
                first_seen = CASE WHEN x.lo <= t.first_seen
                    THEN COALESCE((SELECT min(r.ts) FROM reports r WHERE r.group_id = t.id), t.first_seen) ELSE t.first_seen END,
                last_seen = CASE WHEN x.hi >= t.last_seen
                    THEN COALESCE((SELECT max(r.ts) FROM reports r WHERE r.group_id = t.id), t.last_seen) ELSE t.last_seen END,
                fatal = CASE WHEN x.fatal
                    THEN EXISTS (SELECT 1 FROM group_hourly h WHERE h.group_id = t.id AND h.fatal_count > 0) ELSE t.fatal END
            FROM unnest(\(g.map(\.key)), \(g.map(\.value.span.first)), \(g.map(\.value.span.last)), \(g.map(\.value.fatal)))
                AS x(g, lo, hi, fatal)
            WHERE t.id = x.g AND t.report_count > 0
            """
    }

    /// Sets the device sketches at `keys` to those of the reports stored now
    /// (`crashguard_device_sketches`, the bytes ingest writes), in one statement; rows no longer
    /// there are skipped. The `group_environment_daily` rows of the days of the all-versions daily
    /// keys are rebuilt too (`crashguard_environment_sketches`; a row whose reports left have no
    /// device id gets the empty sketch).
    static func rebuildSketches(_ keys: [ReportEraser.SketchKey]) -> PostgresQuery {
        let h = keys.filter { !$0.daily }, d = keys.filter(\.daily)
        let days = d.filter { $0.version.isEmpty }
        return """
            WITH environment_sketches AS (
                SELECT * FROM crashguard_environment_sketches(\(days.map(\.group))::bigint[], \(days.map(\.bucket))::timestamptz[])
            ), environment_daily AS (
                UPDATE group_environment_daily t SET sketch = COALESCE((
                    SELECT s.sketch FROM environment_sketches s
                    WHERE s.group_id = t.group_id AND s.environment = t.environment AND s.app_version = t.app_version AND s.day = t.day
                ), ''::bytea)
                FROM unnest(\(days.map(\.group))::bigint[], \(days.map(\.bucket))::timestamptz[]) AS k(g, b)
                WHERE t.group_id = k.g AND t.day = k.b
            ), hourly AS (
                UPDATE group_version_hourly t SET sketch = s.sketch
                FROM crashguard_device_sketches(\(h.map(\.group))::bigint[], \(h.map(\.version))::text[], \(h.map(\.bucket))::timestamptz[],
                                                interval '1 hour') s
                WHERE t.group_id = s.group_id AND t.app_version = s.app_version AND t.hour = s.bucket
            )
            UPDATE group_version_daily t SET sketch = s.sketch
            FROM crashguard_device_sketches(\(d.map(\.group))::bigint[], \(d.map(\.version))::text[], \(d.map(\.bucket))::timestamptz[],
                                            interval '24 hours') s
            WHERE t.group_id = s.group_id AND t.app_version = s.app_version AND t.day = s.bucket
            """
    }

    /// Deletes the groups among `ids` with no report and no group merged into them, with their
    /// rollup rows; rows of `(id, merged_into)`.
    static func deleteGroups(_ ids: [Int64]) -> PostgresQuery {
        """
        WITH gone AS (
            DELETE FROM crash_groups g WHERE g.id = ANY(\(ids)) AND g.report_count <= 0
              AND NOT EXISTS (SELECT 1 FROM crash_groups m WHERE m.merged_into = g.id)
            RETURNING g.id, g.merged_into
        ), hourly AS (
            DELETE FROM group_hourly WHERE group_id IN (SELECT id FROM gone)
        ), daily AS (
            DELETE FROM group_daily WHERE group_id IN (SELECT id FROM gone)
        ), models AS (
            DELETE FROM group_environment_model_daily WHERE group_id IN (SELECT id FROM gone)
        ), environment_hours AS (
            DELETE FROM group_environment_hours WHERE group_id IN (SELECT id FROM gone)
        ), facets AS (
            DELETE FROM group_facets WHERE group_id IN (SELECT id FROM gone)
        ), version_hourly AS (
            DELETE FROM group_version_hourly WHERE group_id IN (SELECT id FROM gone)
        ), version_daily AS (
            DELETE FROM group_version_daily WHERE group_id IN (SELECT id FROM gone)
        ), environment_daily AS (
            DELETE FROM group_environment_daily WHERE group_id IN (SELECT id FROM gone)
        )
        SELECT id, merged_into FROM gone
        """
    }
}
