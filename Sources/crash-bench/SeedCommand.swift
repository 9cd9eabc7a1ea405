import ArgumentParser
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// `crash-bench seed`: fills one project with many reports, set-based, for the query
/// benchmarks (10 M in minutes, 100 M in well under an hour on two cores).
///
/// Groups get a Zipf-like share of reports (rank k about 1/k), so do app versions and
/// device models; environments are 90 % production, 7 % staging, 3 % development; one
/// device per five reports (2,000 to 200,000); timestamps are uniform over the last `days` days. The work goes in chunks of one
/// UTC day, each one transaction on one of `jobs` connections: the day's reports are
/// generated from `generate_series` into a temporary table, inserted into `reports` (their
/// daily partition) and the `report_ids` ledger, and every rollup gets the day's rows from
/// the same temporary table: the hourly and daily tables (`group_hourly`, `group_daily`,
/// `group_environment_model_daily`, `project_hourly`, `project_environment_hourly`,
/// `group_environment_hours`, `group_version_hourly`, `group_version_daily` and
/// `group_environment_daily` with their device sketches) are keyed by an hour or day of that
/// chunk only, so they are plain inserts; `group_facets` and the groups' counts and first/last seen are added to.
/// A device's sketch register comes from schema.sql's `crashguard_device_register`, computed
/// once per device. The chunk's row in `seed_chunks` commits with it: an interrupted seed
/// resumes with the chunks not done (run the same command again), and a finished one is not
/// seeded twice. `--verify` recomputes every table from the stored reports with schema.sql's
/// rollup functions (the definitions RollupEquivalenceTests checks ingest against) and fails
/// on any difference.
struct SeedCommand: AsyncParsableCommand {
    /// A value the parallel workers share.
    final class Shared<T: Sendable>: Sendable {
        let value: Mutex<T>
        init(_ value: T) { self.value = Mutex(value) }
    }

    static let configuration = CommandConfiguration(
        commandName: "seed",
        abstract:
            "Fill a project with reports (default 10 M in 20,000 groups over 30 days) and optionally sessions using set-based SQL."
    )

    @Option(help: "PostgreSQL URL.") var databaseURL: String
    @Option(help: "The project's slug (created beforehand; must have no reports).") var project: String
    @Option(help: "Reports to create.") var reports = 10_000_000
    @Option(help: "Crash groups.") var groups = 20_000
    @Option(help: "Days back from now the timestamps cover.") var days = 30
    @Option(help: "Parallel connections, one day's chunk each.") var jobs = 2
    @Option(help: "Release-health sessions to create (SeedCommand+sessions.swift; 0: none).") var sessions = 0
    @Option(help: "Distinct users of the sessions.") var users = 500_000
    @Flag(help: "Recompute every seeded table from the stored reports afterwards and fail on a difference.") var verify = false

    static let versions = [
        "3.4.0", "3.3.2", "3.3.1", "3.3.0", "3.2.0", "3.1.4", "3.1.0", "3.0.0", "2.9.1", "2.9.0",
        "2.8.0", "2.7.3", "2.7.0", "2.6.0", "2.5.1", "2.4.0", "2.3.0", "2.2.0", "2.1.0", "2.0.0",
    ]
    static let models = [
        "iPhone15,2", "iPhone14,5", "iPhone16,1", "iPhone13,2", "iPhone14,2", "iPad13,4", "iPhone12,1", "iPad14,1",
        "iPhone15,4", "iPhone16,2", "iPhone11,8", "iPad7,11", "iPhone14,7", "iPhone13,4", "iPad13,18",
    ]
    static let kinds = [
        "unrecognizedSelector", "container", "kvo", "null", "signal", "exception", "string", "cast", "timer",
        "mainThread", "kvc", "notification", "wildPointer", "arithmetic", "custom",
    ]
    /// Devices: one per five reports, at least 2,000 and at most 200,000.
    static func devices(reports: Int) -> Int { min(200_000, max(2_000, reports / 5)) }

    /// The tables a chunk fills, each from the chunk's generated rows `b` (`$1` is the project
    /// id). The hourly and daily tables get rows of the chunk's UTC day only; the groups and
    /// facets are added to (the chunks take turns there: `pg_advisory_xact_lock`).
    static let chunkSteps: [(table: String, sql: String)] = [
        ("report_ids", "INSERT INTO report_ids (project_id, id) SELECT $1, id FROM b ORDER BY id"),
        (
            "group_hourly",
            """
            INSERT INTO group_hourly (project_id, group_id, hour, app_id, app_version, os, environment, count, fatal_count)
            SELECT $1, gid, date_trunc('hour', ts, 'UTC'), 'com.example.demo', version, os, env, count(*), count(*) FILTER (WHERE fatal)
            FROM b GROUP BY 2, 3, 5, 6, 7
            """
        ),
        (
            "group_daily",
            """
            INSERT INTO group_daily (project_id, group_id, day, app_id, app_version, os, environment, count)
            SELECT $1, gid, date_trunc('day', ts, 'UTC'), 'com.example.demo', version, os, env, count(*)
            FROM b GROUP BY 2, 3, 5, 6, 7
            """
        ),
        (
            "group_environment_model_daily",
            """
            INSERT INTO group_environment_model_daily (group_id, environment, day, model, count, hours)
            SELECT gid, env, date_trunc('day', h, 'UTC'), model, sum(n)::bigint,
                   string_agg(crashguard_model_hours_entry(extract(hour FROM h AT TIME ZONE 'UTC')::int, n),
                              ''::bytea ORDER BY h)
            FROM (SELECT gid, env, date_trunc('hour', ts, 'UTC') AS h, model, count(*) AS n FROM b GROUP BY 1, 2, 3, 4) x
            GROUP BY gid, env, 3, model
            """
        ),
        (
            "project_hourly",
            """
            INSERT INTO project_hourly (project_id, hour, kind, app_version, environment, count)
            SELECT $1, date_trunc('hour', ts, 'UTC'), kind, version, env, count(*) FROM b GROUP BY 2, 3, 4, 5
            """
        ),
        (
            "project_environment_hourly",
            """
            INSERT INTO project_environment_hourly (project_id, hour, environment, count, fatal_count)
            SELECT $1, date_trunc('hour', ts, 'UTC'), env, count(*), count(*) FILTER (WHERE fatal) FROM b GROUP BY 2, 3
            """
        ),
        (
            "group_environment_hours",
            """
            INSERT INTO group_environment_hours (group_id, environment, day, count, hours)
            SELECT gid, env, date_trunc('day', h, 'UTC'), sum(n)::bigint,
                   string_agg(crashguard_model_hours_entry(extract(hour FROM h AT TIME ZONE 'UTC')::int, n),
                              ''::bytea ORDER BY h)
            FROM (SELECT gid, env, date_trunc('hour', ts, 'UTC') AS h, count(*) AS n FROM b GROUP BY 1, 2, 3) x
            GROUP BY gid, env, 3
            """
        ),
        ("group_version_hourly", versionRollupSQL(table: "group_version_hourly", bucket: "hour")),
        ("group_version_daily", versionRollupSQL(table: "group_version_daily", bucket: "day")),
        (
            "group_environment_daily",
            """
            INSERT INTO group_environment_daily (group_id, environment, app_version, day, count, sketch)
            SELECT g, e, v, t, sum(n)::bigint,
                   string_agg(int2send(register::int2) || substring(int2send(rank::int2) FROM 2 FOR 1), ''::bytea ORDER BY register)
            FROM (SELECT b.gid AS g, b.env AS e, x.v, date_trunc('day', b.ts, 'UTC') AS t, b.register, max(b.drank) AS rank, count(*) AS n
                  FROM b CROSS JOIN LATERAL (VALUES (''), (b.version)) AS x(v) GROUP BY 1, 2, 3, 4, 5) s
            GROUP BY 1, 2, 3, 4
            """
        ),
        ("(turn)", "SELECT pg_advisory_xact_lock(hashtext('crash-bench seed') + $1)"),
        (
            "group_facets",
            """
            INSERT INTO group_facets AS t (project_id, group_id, facet, value, count, first_seen, last_seen)
            SELECT $1, b.gid, f.facet, f.value, count(*), min(b.ts), max(b.ts)
            FROM b, LATERAL (VALUES ('app', 'com.example.demo'), ('version', b.version), ('os', b.os), ('environment', b.env)) AS f(facet, value)
            GROUP BY 2, 3, 4 ORDER BY 2, 3, 4
            ON CONFLICT (group_id, facet, value) DO UPDATE SET count = t.count + EXCLUDED.count,
                first_seen = least(t.first_seen, EXCLUDED.first_seen), last_seen = greatest(t.last_seen, EXCLUDED.last_seen)
            """
        ),
        (
            "crash_groups",
            """
            UPDATE crash_groups g SET report_count = g.report_count + t.n,
                first_seen = CASE WHEN g.report_count = 0 THEN t.f ELSE least(g.first_seen, t.f) END,
                last_seen = CASE WHEN g.report_count = 0 THEN t.l ELSE greatest(g.last_seen, t.l) END,
                fatal = g.fatal OR t.fatal
            FROM (SELECT gid, count(*) AS n, min(ts) AS f, max(ts) AS l, bool_or(fatal) AS fatal FROM b GROUP BY 1) t
            WHERE g.id = t.gid AND g.project_id = $1
            """
        ),
    ]

    /// Per group, version ('' and each) and hour or day of the chunk: the report count and the
    /// device sketch (sorted `(register, rank)` entries, the largest rank of each register), as
    /// schema.sql's `crashguard_version_rollups` derives them from stored reports.
    static func versionRollupSQL(table: String, bucket: String) -> String {
        """
        INSERT INTO \(table) (group_id, app_version, \(bucket), count, sketch)
        SELECT g, v, t, sum(n)::bigint,
               string_agg(int2send(register::int2) || substring(int2send(rank::int2) FROM 2 FOR 1), ''::bytea ORDER BY register)
        FROM (SELECT b.gid AS g, x.v, date_trunc('\(bucket)', b.ts, 'UTC') AS t, b.register, max(b.drank) AS rank, count(*) AS n
              FROM b CROSS JOIN LATERAL (VALUES (''), (b.version)) AS x(v) GROUP BY 1, 2, 3, 4) s
        GROUP BY 1, 2, 3
        """
    }

    /// Each seeded table against its recomputation from the stored reports (schema.sql's
    /// functions): rows that differ either way.
    static let verifications: [(table: String, sql: String)] = [
        (
            "report_ids",
            "SELECT count(*) FROM (SELECT id FROM report_ids WHERE project_id = $1 EXCEPT ALL SELECT id FROM reports WHERE project_id = $1) x"
        ),
        (
            "reports",
            "SELECT count(*) FROM (SELECT id FROM reports WHERE project_id = $1 EXCEPT ALL SELECT id FROM report_ids WHERE project_id = $1) x"
        ),
        (
            "crash_groups",
            """
            SELECT count(*) FROM ((SELECT id, report_count, first_seen, last_seen, fatal FROM crash_groups WHERE project_id = $1 AND report_count > 0
                                   EXCEPT SELECT * FROM crashguard_rollup_group_totals($1))
                                  UNION ALL (SELECT * FROM crashguard_rollup_group_totals($1)
                                   EXCEPT SELECT id, report_count, first_seen, last_seen, fatal FROM crash_groups WHERE project_id = $1)) x
            """
        ),
        (
            "group_hourly",
            symmetric(
                "SELECT project_id, group_id, hour, app_id, app_version, os, environment, count, fatal_count FROM group_hourly WHERE project_id = $1",
                "SELECT * FROM crashguard_rollup_group_hourly($1)")
        ),
        (
            "group_daily",
            symmetric(
                "SELECT project_id, group_id, day, app_id, app_version, os, environment, count FROM group_daily WHERE project_id = $1",
                "SELECT * FROM crashguard_rollup_group_daily($1)")
        ),
        (
            "project_hourly",
            symmetric(
                "SELECT project_id, hour, kind, app_version, environment, count FROM project_hourly WHERE project_id = $1",
                "SELECT * FROM crashguard_rollup_project_hourly($1)")
        ),
        (
            "project_environment_hourly",
            symmetric(
                "SELECT project_id, hour, environment, count, fatal_count FROM project_environment_hourly WHERE project_id = $1",
                "SELECT * FROM crashguard_rollup_project_environment_hourly($1)")
        ),
        (
            "group_environment_hours",
            symmetric(
                "SELECT e.group_id, e.environment, e.day, e.count, e.hours FROM group_environment_hours e JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1",
                "SELECT * FROM crashguard_rollup_group_environment_hours($1)")
        ),
        (
            "group_facets",
            symmetric(
                "SELECT project_id, group_id, facet, value, count, first_seen, last_seen FROM group_facets WHERE project_id = $1",
                "SELECT * FROM crashguard_rollup_group_facets($1)")
        ),
        (
            "group_environment_model_daily",
            symmetric(
                "SELECT m.group_id, m.environment, m.day, m.model, m.count, m.hours FROM group_environment_model_daily m JOIN crash_groups g ON g.id = m.group_id WHERE g.project_id = $1",
                "SELECT * FROM crashguard_rollup_group_environment_model_daily($1)")
        ),
        (
            "group_version_hourly",
            symmetric(
                "SELECT v.group_id, v.app_version, v.hour, v.count, v.sketch FROM group_version_hourly v JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1",
                "SELECT * FROM crashguard_version_rollups($1, 'hour')")
        ),
        (
            "group_version_daily",
            symmetric(
                "SELECT v.group_id, v.app_version, v.day, v.count, v.sketch FROM group_version_daily v JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1",
                "SELECT * FROM crashguard_version_rollups($1, 'day')")
        ),
        (
            "group_environment_daily",
            symmetric(
                "SELECT e.group_id, e.environment, e.app_version, e.day, e.count, e.sketch FROM group_environment_daily e JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1",
                "SELECT * FROM crashguard_environment_rollups($1)")
        ),
    ]

    private static func symmetric(_ a: String, _ b: String) -> String {
        "SELECT count(*) FROM (((\(a)) EXCEPT ALL (\(b))) UNION ALL ((\(b)) EXCEPT ALL (\(a)))) x"
    }

    /// Tables seeded directly, or the seed's own bookkeeping.
    static let direct: Set<String> = ["projects", "crash_groups", "reports", "seed_state", "seed_chunks", "seed_groups", "seed_devices"]

    func run() async throws {
        do {
            try await seed()
        } catch let error as PSQLError {
            throw BenchError("PostgreSQL: \(error.serverInfo?[.message] ?? String(reflecting: error))")
        }
    }

    /// The seed's shape, fixed by the first run for a project and read back on a resumed one.
    struct Plan: Sendable {
        var reports: Int
        var groups: Int
        var days: Int
        /// Seconds since 1970 of the seed's "now".
        var anchor: Double

        /// Chunk k is the UTC day k days before the anchor's, up to the anchor: its bounds and
        /// its share of the reports (in proportion to its length).
        func chunk(_ k: Int) -> (from: Double, to: Double, reports: Int) {
            let midnight = (anchor / 86_400).rounded(.down) * 86_400
            let from = midnight - Double(k) * 86_400
            let to = min(from + 86_400, anchor)
            let total = anchor - (midnight - Double(days - 1) * 86_400)
            func before(_ t: Double) -> Int { Int((Double(reports) * (t - (anchor - total)) / total).rounded()) }
            return (from, to, before(to) - before(from))
        }
    }

    func seed() async throws {
        let logger = Bench.quietLogger
        let clock = ContinuousClock()
        let started = clock.now
        let connection = try await Bench.connect(databaseURL, logger: logger)
        try await Self.session(connection)
        guard let projectID = try await Bench.values(connection, "SELECT id FROM projects WHERE slug = \(project)", as: Int64.self).first
        else { throw BenchError("no project \(project): create it with `crash-server project create \(project)`") }
        let plan = try await prepare(connection, projectID: projectID)
        guard let plan else {
            print("seed: project \(project) is seeded already (nothing to do)")
            try await connection.close()
            return
        }

        let devices = Int(try await Bench.values(connection, "SELECT count(*) FROM seed_devices", as: Int64.self).first ?? 0)
        let done = Set(
            try await Bench.values(connection, "SELECT chunk FROM seed_chunks WHERE project_id = \(projectID)", as: Int32.self).map(Int.init))
        let todo = (0..<plan.days).filter { !done.contains($0) }
        if !done.isEmpty { print("seed: resuming: \(done.count) of \(plan.days) days done") }
        let insertStart = clock.now
        let inserted = Shared(0)
        let queue = Shared(todo)
        let times = Shared([String: Double]())
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for _ in 0..<max(1, jobs) {
                tasks.addTask {
                    let c = try await Bench.connect(databaseURL, logger: logger)
                    try await Self.session(c)
                    while let k = queue.value.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
                        let t0 = ContinuousClock.now
                        let n = try await Self.seedChunk(c, projectID: projectID, plan: plan, chunk: k, devices: devices, times: times)
                        let total = inserted.value.withLock { s in
                            s += n
                            return s
                        }
                        let elapsed = Bench.seconds(ContinuousClock.now - insertStart)
                        print(
                            String(
                                format: "seed: day %d/%d: %d reports in %.1f s; %d this run at %.0f reports/s", k + 1, plan.days, n,
                                Bench.seconds(ContinuousClock.now - t0), total, Double(total) / elapsed))
                    }
                    try await c.close()
                }
            }
            try await tasks.waitForAll()
        }
        let insertSeconds = Bench.seconds(clock.now - insertStart)
        let count = inserted.value.withLock { $0 }
        let spent = times.value.withLock { $0 }.sorted { $0.value > $1.value }
        print("seed: time per step (s, all connections): " + spent.map { String(format: "%@ %.1f", $0.key, $0.value) }.joined(separator: ", "))
        print(
            String(
                format: "seed: %d reports with their rollups in %.0f s (%.0f reports/s)", count, insertSeconds,
                Double(count) / max(insertSeconds, 0.001)))

        let analyzeStart = clock.now
        for table in ["reports", "crash_groups"] + Self.chunkSteps.map(\.table).filter({ !$0.hasPrefix("(") }) {
            try await connection.query(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: logger)
        }
        try await connection.query("DELETE FROM seed_state WHERE project_id = \(projectID)", logger: logger)
        try await connection.query("DELETE FROM seed_chunks WHERE project_id = \(projectID)", logger: logger)
        try await connection.query("DELETE FROM seed_groups WHERE project_id = \(projectID)", logger: logger)
        print(String(format: "seed: ANALYZE in %.0f s", Bench.seconds(clock.now - analyzeStart)))

        if verify {
            let verifyStart = clock.now
            var differences: [String] = []
            for check in Self.verifications {
                let n =
                    try await Bench.values(connection, PostgresQuery(unsafeSQL: check.sql, binds: Self.binds(projectID)), as: Int64.self).first ?? 0
                if n != 0 { differences.append("\(check.table): \(n) rows") }
            }
            print(String(format: "seed: verified in %.0f s", Bench.seconds(clock.now - verifyStart)))
            guard differences.isEmpty else {
                throw BenchError("seed: tables differ from their recomputation: \(differences.joined(separator: ", "))")
            }
        }

        let sessionTables: Set<String> = ["session_states", "session_aggregates", "session_deltas", "session_hours", "session_days"]
        if sessions > 0 {
            try await Self.seedSessions(connection, projectID: projectID, sessions: sessions, users: users, days: plan.days)
        }

        // Rollups (tables with a count or a sketch) that nothing above fills: one added since.
        let tables = try await Bench.values(
            connection,
            """
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname IN ('count', 'sketch') AND NOT a.attisdropped)
            """, as: String.self)
        let covered = Self.direct.union(Self.chunkSteps.map(\.table)).union(sessions > 0 ? sessionTables : [])
        let missing = tables.filter { !covered.contains($0) && !$0.hasPrefix("schema") }
        if !missing.isEmpty {
            print(
                "seed: WARNING: rollups the seed leaves empty (add a step to SeedCommand.chunkSteps): \(missing.sorted().joined(separator: ", "))"
            )
        }
        try await connection.close()
        let total = Bench.seconds(clock.now - started)
        print(String(format: "seed: %d reports, %d groups, %d days in %.0f s", plan.reports, plan.groups, plan.days, total))
        print("ROW|seed|\(plan.reports)|\(plan.groups)|\(String(format: "%.0f", total))")
    }

    /// The plan of a seed begun for this project (resumed), or a new one with the groups,
    /// devices and partitions made; nil when the project already has groups and no seed under
    /// way (seeded before, or not empty).
    private func prepare(_ connection: PostgresConnection, projectID: Int64) async throws -> Plan? {
        let logger = Bench.quietLogger
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS seed_state (project_id bigint PRIMARY KEY, reports bigint NOT NULL, groups int NOT NULL,
                                                   days int NOT NULL, anchor float8 NOT NULL)
            """, logger: logger)
        try await connection.query(
            "CREATE TABLE IF NOT EXISTS seed_chunks (project_id bigint, chunk int, reports bigint NOT NULL, PRIMARY KEY (project_id, chunk))",
            logger: logger)
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS seed_groups (project_id bigint, rank int, id bigint NOT NULL, kind text NOT NULL, title text NOT NULL,
                                                    fatal boolean NOT NULL, stack text NOT NULL, PRIMARY KEY (project_id, rank))
            """, logger: logger)
        for try await (r, g, d, a) in try await connection.query(
            "SELECT reports, groups, days, anchor FROM seed_state WHERE project_id = \(projectID)", logger: logger
        ).decode((Int64, Int32, Int32, Double).self) {
            print("seed: resuming the seed of project \(project): \(r) reports, \(g) groups, \(d) days (the first run's options)")
            return Plan(reports: Int(r), groups: Int(g), days: Int(d), anchor: a)
        }
        let existing =
            try await Bench.values(connection, "SELECT count(*) FROM crash_groups WHERE project_id = \(projectID)", as: Int64.self).first ?? 0
        guard existing == 0 else { return nil }

        let t0 = ContinuousClock.now
        // The devices and their sketch registers (0 to n - 1), shared by every project seeded in
        // this database: made once, extended when a larger seed wants more.
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS seed_devices (d int PRIMARY KEY, device_id text NOT NULL, register int NOT NULL, rank int NOT NULL)
            """, logger: logger)
        try await connection.query(
            """
            INSERT INTO seed_devices (d, device_id, register, rank)
            SELECT d, 'install-' || d, r.register, r.rank
            FROM generate_series((SELECT coalesce(max(d) + 1, 0) FROM seed_devices), \(Self.devices(reports: reports) - 1)) AS d,
                 LATERAL crashguard_device_register('install-' || d) r
            """, logger: logger)
        let plan = Plan(reports: reports, groups: groups, days: days, anchor: Date().timeIntervalSince1970)
        try await connection.query("BEGIN", logger: logger)
        try await connection.query(
            """
            SELECT crashguard_ensure_partitions(to_timestamp(\(unescaped: String(plan.anchor)))::date - \(unescaped: String(days + 1)),
                                                to_timestamp(\(unescaped: String(plan.anchor)))::date + 3)
            """, logger: logger)
        // The groups: rank 1 is the hottest. Fatal kinds get a fixed short stack.
        let kinds = "ARRAY['" + Self.kinds.joined(separator: "','") + "']"
        try await connection.query(
            """
            INSERT INTO crash_groups (project_id, signature, grouping_version, kind, title, normalized_reason, first_seen, last_seen, created_at)
            SELECT \(unescaped: String(projectID)), encode(sha256(convert_to('seed:' || i, 'UTF8')), 'hex'), 'v1', (\(unescaped: kinds))[1 + i % 15],
                   t, t || E'\\n(seeded)', now(), now(), now()
            FROM generate_series(1, \(unescaped: String(groups))) AS i,
                 LATERAL (SELECT '-[SeedController' || i || ' handle:]: unrecognized selector sent to instance 0x?' AS t) x
            ORDER BY i
            """, logger: logger)
        try await connection.query(
            """
            INSERT INTO seed_groups (project_id, rank, id, kind, title, fatal, stack)
            SELECT g.project_id, i, g.id, g.kind, g.title, g.kind IN ('signal', 'exception'),
                   json_build_array('0   Demo 0x0000000100004000 -[SeedController' || i || ' handle:] + 44',
                                    '1   UIKitCore 0x00000001a0000000 -[UIApplication sendAction:to:from:forEvent:] + 96',
                                    '2   UIKitCore 0x00000001a0001000 UIApplicationMain + 340')::text
            FROM generate_series(1, \(unescaped: String(groups))) AS i
            JOIN crash_groups g ON g.project_id = \(unescaped: String(projectID)) AND g.signature = encode(sha256(convert_to('seed:' || i, 'UTF8')), 'hex')
            """, logger: logger)
        try await connection.query(
            """
            INSERT INTO seed_state (project_id, reports, groups, days, anchor)
            VALUES (\(projectID), \(Int64(reports)), \(Int32(groups)), \(Int32(days)), \(plan.anchor))
            """, logger: logger)
        try await connection.query("COMMIT", logger: logger)
        print(String(format: "seed: %d groups in %.1f s", groups, Bench.seconds(ContinuousClock.now - t0)))
        return plan
    }

    /// One UTC day: its reports, ledger rows and rollups, and its `seed_chunks` row, in one
    /// transaction. Returns the reports stored (0 when another run did the chunk).
    private static func seedChunk(
        _ c: PostgresConnection, projectID: Int64, plan: Plan, chunk k: Int, devices: Int, times: Shared<[String: Double]>
    ) async throws -> Int {
        let logger = Bench.quietLogger
        var t0 = ContinuousClock.now
        func lap(_ step: String) {
            let now = ContinuousClock.now
            times.value.withLock { $0[step, default: 0] += Bench.seconds(now - t0) }
            t0 = now
        }
        let (from, to, count) = plan.chunk(k)
        let versions = "ARRAY['" + Self.versions.joined(separator: "','") + "']"
        let models = "ARRAY['" + Self.models.joined(separator: "','") + "']"
        let p = String(projectID)
        try await c.query("BEGIN", logger: logger)
        let claimed = try await Bench.values(
            c,
            "INSERT INTO seed_chunks (project_id, chunk, reports) VALUES (\(projectID), \(Int32(k)), \(Int64(count))) ON CONFLICT DO NOTHING RETURNING chunk",
            as: Int32.self)
        guard !claimed.isEmpty else {
            try await c.query("ROLLBACK", logger: logger)
            return 0
        }
        // The day's reports, in time order: rank, version and model Zipf-like; any device;
        // 90 % production, 7 % staging, 3 % development.
        try await c.query(
            """
            CREATE TEMP TABLE b ON COMMIT DROP AS
            SELECT gen_random_uuid() AS id, s.i, g.rank, g.id AS gid, s.ts, g.kind, g.fatal,
                   (\(unescaped: versions))[s.v] AS version, s.v, (\(unescaped: models))[s.m] AS model,
                   CASE WHEN (\(unescaped: models))[s.m] LIKE 'iPad%' THEN 'iPadOS' ELSE 'iOS' END AS os,
                   CASE WHEN s.e < 0.90 THEN 'production' WHEN s.e < 0.97 THEN 'staging' ELSE 'development' END AS env,
                   d.device_id, d.register, d.rank AS drank
            FROM (
                SELECT i, to_timestamp(\(unescaped: String(from)) + (\(unescaped: String(to - from)) * (i - 1 + random()) / \(unescaped: String(count)))) AS ts,
                       least(floor(exp(random() * ln(\(unescaped: String(plan.groups + 1)))))::int, \(unescaped: String(plan.groups))) AS rank,
                       least(floor(exp(random() * ln(\(unescaped: String(Self.versions.count + 1)))))::int, \(unescaped: String(Self.versions.count))) AS v,
                       least(floor(exp(random() * ln(\(unescaped: String(Self.models.count + 1)))))::int, \(unescaped: String(Self.models.count))) AS m,
                       floor(random() * \(unescaped: String(devices)))::int AS dv, random() AS e
                FROM generate_series(1, \(unescaped: String(count))) AS i
            ) s
            JOIN seed_groups g ON g.project_id = \(unescaped: p) AND g.rank = s.rank
            JOIN seed_devices d ON d.d = s.dv
            """, logger: logger)
        lap("(generate)")
        try await c.query(
            """
            INSERT INTO reports (project_id, id, group_id, ts, received_at, kind, reason, stack, fatal, app_id, app_version, app_build, os,
                                 os_version, model, device_id, context, environment)
            SELECT \(unescaped: p), b.id, b.gid, b.ts, b.ts + interval '3 seconds', b.kind,
                   replace(g.title, '0x?', '0x' || to_hex((b.i::bigint + \(unescaped: String(k)) * 10000000) * 7919)), g.stack, b.fatal,
                   'com.example.demo', b.version, '4' || lpad(b.v::text, 3, '0'), b.os, '17.' || (b.i % 6), b.model, b.device_id,
                   json_build_object('screen', 'Seed', 'action', 'returned nil')::text, b.env
            FROM b JOIN seed_groups g ON g.project_id = \(unescaped: p) AND g.rank = b.rank
            ORDER BY b.ts
            """, logger: logger)
        lap("reports")
        for step in chunkSteps {
            try await c.query(
                PostgresQuery(unsafeSQL: step.sql, binds: step.sql.contains("$1") ? binds(projectID) : PostgresBindings()), logger: logger)
            lap(step.table)
        }
        try await c.query("COMMIT", logger: logger)
        lap("(commit)")
        return count
    }

    private static func binds(_ projectID: Int64) -> PostgresBindings {
        var b = PostgresBindings()
        b.append(projectID)
        return b
    }

    private static func session(_ c: PostgresConnection) async throws {
        for setting in ["SET TimeZone = 'UTC'", "SET synchronous_commit = off", "SET work_mem = '256MB'", "SET maintenance_work_mem = '256MB'"] {
            try await c.query(PostgresQuery(unsafeSQL: setting), logger: Bench.quietLogger)
        }
    }
}
