import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The rollups on PostgreSQL: folds the facts that ingest appends to `rollup_pending` into
/// `group_hourly`, `group_daily`, `group_facets`, `project_hourly`, `project_environment_hourly`,
/// `group_environment_hours`, `group_version_hourly/daily`, `group_environment_daily` and
/// `group_environment_model_daily` (docs/server.md, "The rollup aggregator").
///
/// A fold takes pending rows (deletes them) and adds their reports to the rollups in one
/// transaction: a kill at any moment leaves both or neither, so every report is added once.
/// It holds the aggregator's advisory lock (``lockID``) for its transaction, as does every other
/// writer of the rollups (``ReportEraser``): one fold at a time across every server on the
/// database, and no two writers of a rollup row at once.
struct PostgresRollupStore: RollupStore {
    let database: CrashDatabase
    let logger: Logger
    /// Pending rows one cycle takes at most, and reports (counted by whole rows: the first row
    /// is always taken).
    var cycleRows = PostgresRollupStore.serverCycle.rows, cycleReports = PostgresRollupStore.serverCycle.reports

    init(database: CrashDatabase) {
        self.database = database
        logger = database.logger
    }

    /// The advisory lock of the rollup writers ("crrollup").
    static let lockID: Int64 = 0x6372_726F_6C6C_7570
    /// The server's cycle: at most 1000 pending rows (each one project's reports of one ingest
    /// statement) and about 20,000 reports.
    static let serverCycle = (rows: 1000, reports: 20_000)

    /// One cycle: when no other server holds the lock, takes the oldest pending rows (at most
    /// `cycleRows` and about `cycleReports` reports, in commit order: only committed rows are
    /// visible, so a batch that commits late is taken by a later cycle) and folds them, in one
    /// transaction.
    ///
    /// - Parameter afterTaking: runs after the rows are taken and before the rollups are written,
    ///   on the cycle's connection (tests interrupt the cycle there).
    ///
    /// A connection that closes mid-cycle (PostgreSQL restarts) ends it with an error
    /// (``PostgresClient/withTransactionEndingOnClose(logger:_:)``): a cycle that waited
    /// for a statement's answer forever would hold this process's gate (``RollupCycles``), and
    /// every reader behind it.
    func aggregate(afterTaking: @escaping @Sendable (PostgresConnection) async throws -> Void) async throws -> RollupCycle {
        try await database.client.withTransactionEndingOnClose(logger: logger) { [self] connection in
            var locked = false
            for try await got in try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.lockID))", logger: logger)
                .decode(Bool.self)
            { locked = got }
            guard locked else { return .standby }
            let fold = RollupFold(logger: logger)
            let facts = try await fold.take(
                """
                DELETE FROM rollup_pending WHERE seq IN (
                    SELECT seq FROM (
                        SELECT seq, reports, sum(reports) OVER (ORDER BY seq) AS total
                        FROM (SELECT seq, reports FROM rollup_pending ORDER BY seq LIMIT \(cycleRows)) oldest
                    ) x WHERE total - reports < \(cycleReports))
                RETURNING project_id, facts
                """, connection)
            try await afterTaking(connection)
            try await fold.fold(facts.facts, connection)
            let full = facts.rows >= cycleRows || facts.facts.reports.count >= cycleReports
            return .folded(rows: facts.rows, reports: facts.facts.reports.count, full: full)
        }
    }

    func aggregate() async throws -> RollupCycle { try await aggregate(afterTaking: { _ in }) }

    /// Takes the aggregator's lock in the caller's transaction, waiting for a cycle in progress
    /// (``ReportEraser`` takes it before it locks anything else, so the two never wait on each
    /// other in a cycle).
    static func lock(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_xact_lock(\(lockID))", logger: logger)
    }

    /// The newest pending row of `project` (nil: of any project), if any.
    func lastPending(project: Int64?) async throws -> Int64? {
        let rows = try await database.client.query(
            "SELECT max(seq) FROM rollup_pending WHERE \(project)::bigint IS NULL OR project_id = \(project)", logger: logger)
        var last: Int64?
        for try await seq in rows.decode(Int64?.self) { last = seq }
        return last
    }

    /// Whether a row of `project` (nil: of any project) up to `seq` is still pending.
    func isPending(project: Int64?, upTo seq: Int64) async throws -> Bool {
        let rows = try await database.client.query(
            """
            SELECT EXISTS (SELECT 1 FROM rollup_pending WHERE (\(project)::bigint IS NULL OR project_id = \(project)) AND seq <= \(seq))
            """, logger: logger)
        var pending = false
        for try await value in rows.decode(Bool.self) { pending = value }
        return pending
    }

    /// The pending rows, their reports, and the age of the oldest in seconds (0 when none).
    func tail() async throws -> RollupTail {
        let rows = try await database.client.query(
            """
            SELECT count(*), COALESCE(sum(reports), 0)::bigint, COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8
            FROM rollup_pending
            """, logger: logger)
        var tail = RollupTail(rows: 0, reports: 0, ageSeconds: 0)
        for try await (count, reports, age) in rows.decode((Int64, Int64, Double).self) {
            tail = RollupTail(rows: Int(count), reports: Int(reports), ageSeconds: max(0, age))
        }
        return tail
    }
}

/// Adds rollup facts to the rollups, on a connection whose transaction holds the aggregator's
/// lock (``PostgresRollupStore/lock(_:logger:)``): the aggregator's cycles and the eraser's
/// folds of a project's pending facts.
struct RollupFold: Sendable {
    let logger: Logger

    /// Folds every pending row of `project` in the caller's transaction, which holds the lock
    /// (``PostgresRollupStore/lock(_:logger:)``); returns the reports folded.
    @discardableResult
    func foldPending(project: Int64, on connection: PostgresConnection) async throws -> Int {
        let facts = try await take(
            "DELETE FROM rollup_pending WHERE project_id = \(project) RETURNING project_id, facts", connection)
        try await fold(facts.facts, connection)
        return facts.facts.reports.count
    }

    /// The rows `delete` took, decoded.
    func take(_ delete: PostgresQuery, _ connection: PostgresConnection) async throws -> (rows: Int, facts: RollupFactTable) {
        var facts = RollupFactTable()
        var rows = 0
        for try await (project, encoded) in try await connection.query(delete, logger: logger).decode((Int64, ByteBuffer).self) {
            try facts.append(encoded, project: project)
            rows += 1
        }
        return (rows, facts)
    }

    /// Adds `facts` to every rollup, each key once, in one statement.
    func fold(_ table: RollupFactTable, _ connection: PostgresConnection) async throws {
        guard !table.reports.isEmpty else { return }
        let (facts, text) = (table.reports, BatchText(table))
        var counts: [HourlyKey: (n: Int64, fatal: Int64)] = [:]
        for (fact, ranks) in zip(facts, text.reports) {
            let key = HourlyKey(
                project: fact.project, hour: TimeWindow.floor(fact.time, TimeWindow.hour), group: fact.group, app: ranks.app,
                version: ranks.version, os: ranks.os, environment: ranks.environment)
            Self.count(&counts[key, default: (0, 0)], fatal: fact.fatal)
        }
        // The project's totals per hour and environment, and each group's per environment and
        // day by hour, from the group rows (fewer than the reports).
        var totals: [TotalsKey: (n: Int64, fatal: Int64)] = [:]
        var environmentHours: [EnvironmentDayKey: ModelHours] = [:]
        for (key, value) in counts {
            let total = TotalsKey(project: key.project, hour: key.hour, environment: key.environment)
            totals[total, default: (0, 0)].n += value.n
            totals[total, default: (0, 0)].fatal += value.fatal
            let day = TimeWindow.floor(key.hour, TimeWindow.day)
            environmentHours[EnvironmentDayKey(group: key.group, environment: key.environment, day: day), default: ModelHours()]
                .add(key.hour, day: day, count: value.n)
        }
        let sketches = try await versionRollupRows(facts, text, connection)
        let input = RollupSQL.WriteRollups.Input(
            text: text, hourly: counts.sorted { $0.key < $1.key }.map { ($0.key, $0.value.n, $0.value.fatal) },
            totals: totals.sorted { $0.key < $1.key }.map { ($0.key, $0.value.n, $0.value.fatal) },
            environmentHours: environmentHours.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
            rollups: Self.queryRollupRows(facts, text), versionHourly: sketches.hourly, versionDaily: sketches.daily,
            environmentDaily: sketches.environmentDaily)
        _ = try await connection.run(RollupSQL.WriteRollups.self, input, logger: logger)
    }

    /// One hash per report: the entry is made (or found) and changed in place.
    private static func count(_ entry: inout (n: Int64, fatal: Int64), fatal: Bool) {
        entry.n += 1
        if fatal { entry.fatal += 1 }
    }

    /// A `group_hourly` row. `app`, `version`, `os` and `environment` are ``BatchText`` ranks.
    struct HourlyKey: Hashable, Comparable {
        var project: Int64, hour: Date, group: Int64, app: Int32, version: Int32, os: Int32, environment: Int32
        static func < (a: HourlyKey, b: HourlyKey) -> Bool {
            let (x, y) = ((a.project, a.hour, a.group, a.app, a.version, a.os), (b.project, b.hour, b.group, b.app, b.version, b.os))
            return x != y ? x < y : a.environment < b.environment
        }
    }

    /// A `project_environment_hourly` row. `environment` is a ``BatchText`` rank.
    struct TotalsKey: Hashable, Comparable {
        var project: Int64, hour: Date, environment: Int32
        static func < (a: TotalsKey, b: TotalsKey) -> Bool { (a.project, a.hour, a.environment) < (b.project, b.hour, b.environment) }
    }

    /// A `group_environment_hours` row. `environment` is a ``BatchText`` rank.
    struct EnvironmentDayKey: Hashable, Comparable {
        var group: Int64, environment: Int32, day: Date
        static func < (a: Self, b: Self) -> Bool { (a.group, a.environment, a.day) < (b.group, b.environment, b.day) }
    }
}

/// The statement of ``RollupFold/fold(_:_:)``.
enum RollupSQL {
    /// Adds rows to every rollup, each part a data-modifying CTE: the rows are sorted by key and
    /// each key is in them once. Only the aggregator's lock holder runs it, so no other
    /// transaction writes these rows meanwhile.
    enum WriteRollups: FixedStatement {
        struct Input {
            /// What the keys' ranks stand for.
            var text = BatchText(facts: [])
            var hourly: [(key: RollupFold.HourlyKey, n: Int64, fatal: Int64)] = []
            var totals: [(key: RollupFold.TotalsKey, n: Int64, fatal: Int64)] = []
            var environmentHours: [(key: RollupFold.EnvironmentDayKey, value: ModelHours)] = []
            var rollups = RollupFold.QueryRollupRows.empty
            var versionHourly: [RollupFold.VersionRollupRow] = []
            var versionDaily: [RollupFold.VersionRollupRow] = []
            var environmentDaily: [RollupFold.VersionRollupRow] = []
        }

        static let sql = query(Input()).sql

        static func query(_ input: Input) -> PostgresQuery {
            let (hourly, totals, environmentHours, text) = (input.hourly, input.totals, input.environmentHours, input.text)
            let (days, facets, models, projects) = (input.rollups.days, input.rollups.facets, input.rollups.models, input.rollups.projects)
            let (versionHourly, versionDaily, environmentDaily) = (input.versionHourly, input.versionDaily, input.environmentDaily)
            return """
                WITH hourly AS (
                    INSERT INTO group_hourly AS t (project_id, group_id, hour, app_id, app_version, os, environment, count, fatal_count)
                    SELECT unnest(\(hourly.map(\.key.project))), unnest(\(hourly.map(\.key.group))), unnest(\(hourly.map(\.key.hour))),
                           unnest(\(hourly.map { text[$0.key.app] })), unnest(\(hourly.map { text[$0.key.version] })),
                           unnest(\(hourly.map { text[$0.key.os] })), unnest(\(hourly.map { text[$0.key.environment] })),
                           unnest(\(hourly.map(\.n))), unnest(\(hourly.map(\.fatal)))
                    ON CONFLICT (project_id, hour, group_id, app_id, app_version, os, environment) DO UPDATE SET
                        count = t.count + EXCLUDED.count, fatal_count = t.fatal_count + EXCLUDED.fatal_count
                ), daily AS (
                    INSERT INTO group_daily AS t (project_id, group_id, day, app_id, app_version, os, environment, count)
                    SELECT unnest(\(days.map(\.key.project))), unnest(\(days.map(\.key.group))), unnest(\(days.map(\.key.day))),
                           unnest(\(days.map { text[$0.key.app] })), unnest(\(days.map { text[$0.key.version] })),
                           unnest(\(days.map { text[$0.key.os] })), unnest(\(days.map { text[$0.key.environment] })),
                           unnest(\(days.map(\.value)))
                    ON CONFLICT (project_id, day, group_id, app_id, app_version, os, environment) DO UPDATE SET count = t.count + EXCLUDED.count
                ), facets AS (
                    INSERT INTO group_facets AS t (project_id, group_id, facet, value, count, first_seen, last_seen)
                    SELECT unnest(\(facets.map(\.key.project))), unnest(\(facets.map(\.key.group))), unnest(\(facets.map { text[$0.key.facet] })),
                           unnest(\(facets.map { text[$0.key.value] })), unnest(\(facets.map(\.value.n))), unnest(\(facets.map(\.value.first))),
                           unnest(\(facets.map(\.value.last)))
                    ON CONFLICT (group_id, facet, value) DO UPDATE SET count = t.count + EXCLUDED.count,
                        first_seen = LEAST(t.first_seen, EXCLUDED.first_seen), last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)
                ), models AS (
                    INSERT INTO group_environment_model_daily AS t (group_id, environment, day, model, count, hours)
                    SELECT unnest(\(models.map(\.key.group))), unnest(\(models.map { text[$0.key.environment] })),
                           unnest(\(models.map(\.key.day))), unnest(\(models.map { text[$0.key.model] })),
                           unnest(\(models.map(\.value.count))), unnest(\(models.map(\.value.encoded)))
                    ON CONFLICT (group_id, environment, day, model) DO UPDATE SET count = t.count + EXCLUDED.count,
                        hours = crashguard_model_hours_add(t.hours, EXCLUDED.hours, 1)
                ), projects AS (
                    INSERT INTO project_hourly AS t (project_id, hour, kind, app_version, environment, count)
                    SELECT unnest(\(projects.map(\.key.project))), unnest(\(projects.map(\.key.hour))), unnest(\(projects.map { text[$0.key.kind] })),
                           unnest(\(projects.map { text[$0.key.version] })), unnest(\(projects.map { text[$0.key.environment] })),
                           unnest(\(projects.map(\.value)))
                    ON CONFLICT (project_id, hour, kind, app_version, environment) DO UPDATE SET count = t.count + EXCLUDED.count
                ), totals AS (
                    INSERT INTO project_environment_hourly AS t (project_id, hour, environment, count, fatal_count)
                    SELECT unnest(\(totals.map(\.key.project))), unnest(\(totals.map(\.key.hour))), unnest(\(totals.map { text[$0.key.environment] })),
                           unnest(\(totals.map(\.n))), unnest(\(totals.map(\.fatal)))
                    ON CONFLICT (project_id, hour, environment) DO UPDATE SET
                        count = t.count + EXCLUDED.count, fatal_count = t.fatal_count + EXCLUDED.fatal_count
                ), environment_hours AS (
                    INSERT INTO group_environment_hours AS t (group_id, environment, day, count, hours)
                    SELECT unnest(\(environmentHours.map(\.key.group))), unnest(\(environmentHours.map { text[$0.key.environment] })),
                           unnest(\(environmentHours.map(\.key.day))), unnest(\(environmentHours.map(\.value.count))),
                           unnest(\(environmentHours.map(\.value.encoded)))
                    ON CONFLICT (group_id, environment, day) DO UPDATE SET count = t.count + EXCLUDED.count,
                        hours = crashguard_model_hours_add(t.hours, EXCLUDED.hours, 1)
                ), version_hourly AS (
                    INSERT INTO group_version_hourly AS t (group_id, app_version, hour, count, sketch)
                    SELECT unnest(\(versionHourly.map(\.key.group))), unnest(\(versionHourly.map { text[$0.key.version] })),
                           unnest(\(versionHourly.map(\.key.bucket))), unnest(\(versionHourly.map(\.count))), unnest(\(versionHourly.map(\.sketch)))
                    ON CONFLICT (group_id, app_version, hour) DO UPDATE SET count = t.count + EXCLUDED.count,
                        sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
                ), environment_daily AS (
                    INSERT INTO group_environment_daily AS t (group_id, environment, app_version, day, count, sketch)
                    SELECT unnest(\(environmentDaily.map(\.key.group))), unnest(\(environmentDaily.map { text[$0.key.environment] })),
                           unnest(\(environmentDaily.map { text[$0.key.version] })), unnest(\(environmentDaily.map(\.key.bucket))),
                           unnest(\(environmentDaily.map(\.count))), unnest(\(environmentDaily.map(\.sketch)))
                    ON CONFLICT (group_id, environment, app_version, day) DO UPDATE SET count = t.count + EXCLUDED.count,
                        sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
                )
                INSERT INTO group_version_daily AS t (group_id, app_version, day, count, sketch)
                SELECT unnest(\(versionDaily.map(\.key.group))), unnest(\(versionDaily.map { text[$0.key.version] })),
                       unnest(\(versionDaily.map(\.key.bucket))), unnest(\(versionDaily.map(\.count))), unnest(\(versionDaily.map(\.sketch)))
                ON CONFLICT (group_id, app_version, day) DO UPDATE SET count = t.count + EXCLUDED.count,
                    sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
                """
        }
    }
}
