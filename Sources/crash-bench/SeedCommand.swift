import ArgumentParser
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// `crash-bench seed`: fills one (empty) project with many reports, set-based, for the
/// query benchmarks.
///
/// Groups get a Zipf-like share of reports (rank k about 1/k), so do app versions and
/// device models; timestamps are uniform over the last `days` days. Reports go into the
/// partitioned table day by day from `generate_series`; then the idempotency ledger,
/// the groups' counts and first/last seen, and every rollup are derived from the stored
/// reports by schema.sql's rollup functions, one statement each (``SeedCommand/derived``):
/// the same rows ingest would have written (RollupEquivalenceTests). A rollup added to
/// schema.sql is one more function and line there; tables that no line fills are reported
/// at the end.
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
    @Option(help: "Parallel connections for the report inserts.") var jobs = 2
    @Option(help: "Release-health sessions to create (SeedCommand+sessions.swift; 0: none).") var sessions = 0
    @Option(help: "Distinct users of the sessions.") var users = 500_000

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

    /// Everything derived from the seeded reports, one statement each; `$1` is the project id.
    /// Every rollup comes from its schema.sql function (`crashguard_rollup_<table>`,
    /// `crashguard_version_rollups`): the one definition that RollupEquivalenceTests checks
    /// against what ingest writes for the same reports.
    static let derived: [(table: String, sql: String)] =
        [("report_ids", "INSERT INTO report_ids (project_id, id, ts) SELECT project_id, id, ts FROM reports WHERE project_id = $1")]
        + ["group_hourly", "group_daily", "group_facets", "group_model_hourly", "project_hourly"].map { table in
            (table, "INSERT INTO \(table) SELECT * FROM crashguard_rollup_\(table)($1)")
        }
        + [
            (
                "crash_groups",
                """
                UPDATE crash_groups g SET report_count = t.report_count, first_seen = t.first_seen, last_seen = t.last_seen,
                    fatal = t.fatal
                FROM crashguard_rollup_group_totals($1) t WHERE g.id = t.group_id
                """
            ),
            ("group_version_hourly", Self.versionRollupSQL(table: "group_version_hourly", bucket: "hour")),
            ("group_version_daily", Self.versionRollupSQL(table: "group_version_daily", bucket: "day")),
        ]

    /// Per group, version ('' and each) and hour or day: the report count and the device
    /// sketch, as schema.sql's `crashguard_version_rollups` derives them from the reports.
    static func versionRollupSQL(table: String, bucket: String) -> String {
        """
        INSERT INTO \(table) (group_id, app_version, \(bucket), count, sketch)
        SELECT * FROM crashguard_version_rollups($1, '\(bucket)')
        """
    }

    /// Tables seeded directly (not derived) or not per-report at all.
    static let direct: Set<String> = ["projects", "crash_groups", "reports"]

    func run() async throws {
        do {
            try await seed()
        } catch let error as PSQLError {
            throw BenchError("PostgreSQL: \(error.serverInfo?[.message] ?? String(reflecting: error))")
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
        let existing =
            try await Bench.values(
                connection, "SELECT count(*) FROM crash_groups WHERE project_id = \(projectID)", as: Int64.self
            ).first ?? 0
        guard existing == 0 else { throw BenchError("project \(project) already has \(existing) groups: seed a fresh project") }

        try await connection.query(
            "SELECT crashguard_ensure_partitions((now() AT TIME ZONE 'UTC')::date - \(unescaped: String(days + 1)), (now() AT TIME ZONE 'UTC')::date + 3)",
            logger: logger)
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
        try await connection.query("DROP TABLE IF EXISTS seed_groups", logger: logger)
        try await connection.query(
            """
            CREATE UNLOGGED TABLE seed_groups AS
            SELECT i AS rank, g.id, g.kind, g.title, g.kind IN ('signal', 'exception') AS fatal,
                   json_build_array('0   Demo 0x0000000100004000 -[SeedController' || i || ' handle:] + 44',
                                    '1   UIKitCore 0x00000001a0000000 -[UIApplication sendAction:to:from:forEvent:] + 96',
                                    '2   UIKitCore 0x00000001a0001000 UIApplicationMain + 340')::text AS stack
            FROM generate_series(1, \(unescaped: String(groups))) AS i
            JOIN crash_groups g ON g.project_id = \(unescaped: String(projectID)) AND g.signature = encode(sha256(convert_to('seed:' || i, 'UTF8')), 'hex')
            """, logger: logger)
        try await connection.query("ALTER TABLE seed_groups ADD PRIMARY KEY (rank)", logger: logger)
        print(String(format: "seed: %d groups in %.1f s", groups, Bench.seconds(clock.now - started)))

        // Reports, one day (chunk) per statement, `jobs` connections in parallel.
        let chunks = max(days, (reports + 499_999) / 500_000)
        let per = reports / chunks
        let versions = "ARRAY['" + Self.versions.joined(separator: "','") + "']"
        let models = "ARRAY['" + Self.models.joined(separator: "','") + "']"
        let insertStart = clock.now
        let next = Shared(0)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for _ in 0..<max(1, jobs) {
                tasks.addTask {
                    let c = try await Bench.connect(databaseURL, logger: logger)
                    try await Self.session(c)
                    while true {
                        let chunk: Int = next.value.withLock { n in
                            defer { n += 1 }
                            return n
                        }
                        guard chunk < chunks else { break }
                        let count = chunk == chunks - 1 ? reports - per * (chunks - 1) : per
                        // Chunk k covers [now - (k+1) * span, now - k * span).
                        let span = Double(days) * 86_400 / Double(chunks)
                        try await c.query(
                            """
                            INSERT INTO reports (project_id, id, group_id, ts, received_at, kind, reason, stack, fatal, app_id,
                                                 app_version, app_build, os, os_version, model, device_id, context)
                            SELECT \(unescaped: String(projectID)), gen_random_uuid(), g.id, s.ts, s.ts + interval '3 seconds', g.kind,
                                   replace(g.title, '0x?', '0x' || to_hex(s.i::bigint * 7919)), g.stack, g.fatal, 'com.example.demo',
                                   (\(unescaped: versions))[s.v], '4' || lpad(s.v::text, 3, '0'),
                                   CASE WHEN (\(unescaped: models))[s.m] LIKE 'iPad%' THEN 'iPadOS' ELSE 'iOS' END,
                                   '17.' || (s.i % 6), (\(unescaped: models))[s.m], 'install-' || s.d,
                                   json_build_object('screen', 'Seed', 'action', 'returned nil')::text
                            FROM (
                                SELECT i, now() - make_interval(secs => \(unescaped: String(span)) * (\(unescaped: String(chunk)) + random())) AS ts,
                                       floor(exp(random() * ln(\(unescaped: String(groups + 1)))))::int AS rank,
                                       floor(exp(random() * ln(\(unescaped: String(Self.versions.count + 1)))))::int AS v,
                                       floor(exp(random() * ln(\(unescaped: String(Self.models.count + 1)))))::int AS m,
                                       (random() * 200000)::int AS d
                                FROM generate_series(1, \(unescaped: String(count))) AS i
                            ) s
                            JOIN seed_groups g ON g.rank = least(s.rank, \(unescaped: String(groups)))
                            """, logger: logger)
                        print(
                            String(format: "seed: chunk %d/%d (%d reports) at %.0f s", chunk + 1, chunks, count, Bench.seconds(clock.now - started)))
                    }
                    try await c.close()
                }
            }
            try await tasks.waitForAll()
        }
        let inserted = Bench.seconds(clock.now - insertStart)
        print(String(format: "seed: %d reports inserted in %.0f s (%.0f rows/s)", reports, inserted, Double(reports) / inserted))

        // Derived tables, in parallel where they are independent of each other.
        let derivedStart = clock.now
        let queue = Shared(Self.derived)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for _ in 0..<max(1, jobs) {
                tasks.addTask {
                    let c = try await Bench.connect(databaseURL, logger: logger)
                    try await Self.session(c)
                    while let step = queue.value.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
                        let t0 = ContinuousClock.now
                        try await c.query(PostgresQuery(unsafeSQL: step.sql, binds: Self.binds(projectID)), logger: logger)
                        print("seed: \(step.table) in " + String(format: "%.0f s", Bench.seconds(ContinuousClock.now - t0)))
                    }
                    try await c.close()
                }
            }
            try await tasks.waitForAll()
        }
        try await connection.query("DROP TABLE IF EXISTS seed_groups", logger: logger)
        let analyzeStart = clock.now
        for table in ["reports"] + Self.derived.map(\.table) {
            try await connection.query(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: logger)
        }
        print(
            String(
                format: "seed: derived tables in %.0f s, ANALYZE in %.0f s", Bench.seconds(analyzeStart - derivedStart),
                Bench.seconds(clock.now - analyzeStart)))

        let sessionTables: Set<String> = ["session_states", "session_aggregates", "session_deltas", "session_hours", "session_days"]
        if sessions > 0 {
            try await Self.seedSessions(connection, projectID: projectID, sessions: sessions, users: users, days: days)
        }

        // Tables in the schema that nothing above fills: a rollup added since.
        let tables = try await Bench.values(
            connection,
            """
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            """, as: String.self)
        let covered = Self.direct.union(Self.derived.map(\.table)).union(sessions > 0 ? sessionTables : [])
        let missing = tables.filter { !covered.contains($0) && !$0.hasPrefix("schema") && $0 != "seed_groups" }
        if !missing.isEmpty {
            print("seed: WARNING: not filled (add a line to SeedCommand.derived): \(missing.sorted().joined(separator: ", "))")
        }
        try await connection.close()
        let total = Bench.seconds(clock.now - started)
        print(String(format: "seed: %d reports, %d groups, %d days in %.0f s", reports, groups, days, total))
        print("ROW|seed|\(reports)|\(groups)|\(String(format: "%.0f", total))")
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
