import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Each rollup is defined once, in SQL (schema.sql's `crashguard_rollup_*` and
/// `crashguard_version_rollups`, which `crash-bench seed` fills the tables with); the rollup
/// aggregator adds the same rows in Swift from the facts each ingest transaction appends. These
/// tests ingest through the real route and the store and check, table by table, that once the
/// aggregator has folded what is pending the rollups are exactly what the definition derives
/// from the stored reports.
@Suite struct RollupEquivalenceTests {
    /// A rollup table, the rows ingest wrote for project `$1`, and the rows its definition
    /// derives for that project, in the same column order.
    struct Rollup: Sendable, CustomTestStringConvertible {
        var table: String
        var written: String
        var derived: String
        var testDescription: String { table }
    }

    static let rollups: [Rollup] = [
        Rollup(
            table: "group_hourly",
            written:
                "SELECT project_id, group_id, hour, app_id, app_version, os, environment, count, fatal_count FROM group_hourly WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_group_hourly($1)"),
        Rollup(
            table: "group_daily",
            written: "SELECT project_id, group_id, day, app_id, app_version, os, environment, count FROM group_daily WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_group_daily($1)"),
        Rollup(
            table: "group_facets",
            written: "SELECT project_id, group_id, facet, value, count, first_seen, last_seen FROM group_facets WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_group_facets($1)"),
        Rollup(
            table: "group_environment_model_daily",
            written: """
                SELECT m.group_id, m.environment, m.day, m.model, m.count, m.hours FROM group_environment_model_daily m
                JOIN crash_groups g ON g.id = m.group_id WHERE g.project_id = $1
                """,
            derived: "SELECT * FROM crashguard_rollup_group_environment_model_daily($1)"),
        Rollup(
            table: "project_hourly",
            written: "SELECT project_id, hour, kind, app_version, environment, count FROM project_hourly WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_project_hourly($1)"),
        Rollup(
            table: "project_environment_hourly",
            written: "SELECT project_id, hour, environment, count, fatal_count FROM project_environment_hourly WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_project_environment_hourly($1)"),
        Rollup(
            table: "group_environment_hours",
            written: """
                SELECT e.group_id, e.environment, e.day, e.count, e.hours FROM group_environment_hours e
                JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1
                """,
            derived: "SELECT * FROM crashguard_rollup_group_environment_hours($1)"),
        Rollup(
            table: "group_version_hourly",
            written: """
                SELECT v.group_id, v.app_version, v.hour, v.count, v.sketch FROM group_version_hourly v
                JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1
                """,
            derived: "SELECT * FROM crashguard_version_rollups($1, 'hour')"),
        Rollup(
            table: "group_version_daily",
            written: """
                SELECT v.group_id, v.app_version, v.day, v.count, v.sketch FROM group_version_daily v
                JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1
                """,
            derived: "SELECT * FROM crashguard_version_rollups($1, 'day')"),
        Rollup(
            table: "group_environment_daily",
            written: """
                SELECT e.group_id, e.environment, e.app_version, e.day, e.count, e.sketch FROM group_environment_daily e
                JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1
                """,
            derived: "SELECT * FROM crashguard_environment_rollups($1)"),
        Rollup(
            table: "crash_groups",
            written: "SELECT id, report_count, first_seen, last_seen, fatal FROM crash_groups WHERE project_id = $1",
            derived: "SELECT * FROM crashguard_rollup_group_totals($1)"),
    ]

    struct Comparison: Sendable, CustomStringConvertible {
        var table: String, derived: Int64, written: Int64, different: Int64
        var description: String { "\(table): \(derived) rows derived, \(written) written, \(different) differ" }
    }

    /// Tables that are not derived from reports (or are the reports themselves).
    static let notRollups: Set<String> = [
        "projects", "reports", "report_ids", "list_snapshots", "webhooks", "webhook_deliveries", "group_spikes", "debug_files",
        "debug_file_chunks", "dashboard_sessions",
        // Sentry's chunk uploads (debug files on their way in).
        "upload_chunks", "assembled_files",
        // Release health: derived from sessions, not reports (ReleaseHealthTests checks them).
        "session_states", "session_aggregates", "session_deltas", "session_hours", "session_days",
        "session_weeks", "session_rollup_marks",
        // Triage: what people did to groups, and a snooze's new devices (TriageTests checks them).
        "group_activity", "snooze_devices",
        // Accounts and single sign-on: people, their credentials and the audit log.
        "users", "user_setup_links", "user_sessions", "project_members", "api_tokens", "sign_in_failures", "audit_log",
        "oidc_logins",
        // Alert rules and their throttle (the last firing per rule and group), not counts of reports.
        "alert_rules", "alert_firings",
        // Erasure requests, the reports each still has to erase and the sketches it still has
        // to rebuild (ErasureTests checks erasure).
        "deletions", "deletion_reports", "deletion_sketches",
        // The daily quota's counter of each project and UTC day, and the reports erased per
        // project and day of receipt (DailyQuotaTests checks them).
        "project_quota_days", "project_erased_days",
        // Each project's scrubbing, retention and quota settings (ProjectSettingsTests checks them).
        "project_settings",
        // The rollup facts of stored reports not folded yet: the aggregator's queue (the tests
        // of RollupEquivalenceTests+aggregator.swift count each report there or in the rollups).
        "rollup_pending",
    ]

    /// Reports that cross hour and UTC-day edges (fractions of a second either side), with
    /// and without os, model, device and fatal, over kinds, apps, versions and environments
    /// (absent: the default one), sent in
    /// batches of different sizes with a retried batch in between, for two projects (the
    /// other one must not leak into the first one's rows).
    static func reports(seed: Int) -> [TestReport] {
        let midnight = utcMidnight(daysAgo: 1)
        let edges: [Double] = [-3600.5, -0.25, 0, 0.000_5, 59.75, 3599.999, 3600, 7200.5, -86_400 + 1]
        let kinds = ["custom", "container", "signal", "exception"]
        let versions = ["1.0.0", "1.1.0", "2.0.0"]
        let oses: [String?] = ["iOS", "iPadOS", nil, ""]
        let models: [String?] = ["iPhone14,2", nil, "iPad13,4", ""]
        let devices: [String?] = ["device-1", "device-2", nil, "", "device-\(seed)"]
        let fatals: [Bool?] = [true, false, nil]
        let environments: [String?] = [nil, "staging", "production", nil, "dev", "staging"]
        return (0..<180).map { i in
            var report = queryReport(
                "rollup \(i % 7) seed \(seed)", at: midnight.addingTimeInterval(edges[i % edges.count] + Double(i / 37) * 1800),
                kind: kinds[i % kinds.count], version: versions[i % versions.count],
                app: i % 11 == 0 ? "com.example.other" : "com.example.demo",
                os: oses[i % oses.count], model: models[(i / 2) % models.count], device: devices[i % devices.count],
                fatal: fatals[(i / 3) % fatals.count]
            ).object
            report["environment"] = environments[(i / 4) % environments.count]
            return TestReport(object: report)
        }
    }

    @Test func everyRollupTableIsCheckedHere() async throws {
        let tables = try await withTestDatabase { db in
            try await db.client.withConnection { connection in
                let rows = try await connection.query(
                    """
                    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                    """, logger: TestEnvironment.logger)
                var names: Set<String> = []
                for try await name in rows.decode(String.self) { names.insert(name) }
                return names
            }
        }
        let rollups = tables.filter { !Self.notRollups.contains($0) && !$0.hasPrefix("schema") }
        #expect(rollups == Set(Self.rollups.map(\.table)), "a table derived from reports without a definition and a check here")
    }

    @Test func ingestWritesWhatEachRollupDefinitionDerives() async throws {
        let p = try await makeProject(), other = try await makeProject()
        let mine = Self.reports(seed: 1), theirs = Self.reports(seed: 2)
        try await withApp { client in
            // Batches of 1, 7, 50 and the rest; one batch retried (duplicates count nowhere).
            var offset = 0
            for size in [1, 7, 50, mine.count] {
                let batch = Array(mine[offset..<min(mine.count, offset + size)])
                try await client.send(batch, key: p.ingestKey)
                if size == 7 { try await client.send(batch, key: p.ingestKey) }
                offset += batch.count
            }
            try await client.send(theirs, key: other.ingestKey)
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    /// One ingest transaction, as the batcher makes of concurrent requests, holding two
    /// projects' reports in mixed order, one id in both projects, and ids the first project
    /// already stored: each project gets its own reports, groups and rollup rows, and the
    /// stored ids are not new again.
    @Test func oneTransactionMixingProjectsAndStoredIDs() async throws {
        let a = try await makeProject(), b = try await makeProject()
        let mine = try Self.decoded(Self.reports(seed: 3))
        var copied = try Self.decoded(Self.reports(seed: 4))
        for i in 0..<5 { copied[i].id = mine[i].id }
        let theirs = copied
        try await withTestDatabase { db in
            let pa = try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(a.ingestKey))?.project)
            let pb = try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(b.ingestKey))?.project)
            let first = mine.prefix(20).map { IngestItem(project: pa, report: $0) }
            #expect(try await PostgresIngestStore(database: db).store(first, gate: CommitGate()) == Set(first.map(\.key)))
            let rest = mine.dropFirst(10).map { IngestItem(project: pa, report: $0) }
            let other = theirs.map { IngestItem(project: pb, report: $0) }
            var mixed = rest + other
            var rng = SystemRandomNumberGenerator()
            mixed.shuffle(using: &rng)
            let fresh = try await PostgresIngestStore(database: db).store(mixed, gate: CommitGate())
            #expect(fresh == Set(rest.dropFirst(10).map(\.key) + other.map(\.key)))
            #expect(try await db.storedReportIDs(slug: a.project).count == mine.count)
            #expect(Set(try await db.storedReportIDs(slug: b.project)) == Set(theirs.map(\.id)))
            #expect(try await db.rollupTotal(slug: a.project) == Int64(mine.count))
            #expect(try await db.rollupTotal(slug: b.project) == Int64(theirs.count))
        }
        try await Self.expectRollupsMatch(slug: a.project)
        try await Self.expectRollupsMatch(slug: b.project)
    }

    /// A transaction whose reports pass the batch bytes (the largest bodies: one request over
    /// the bound is still one transaction) writes its reports in several statements, the
    /// rollups with the last: every report is stored once and every rollup is what its
    /// definition derives, as when the same reports are written in one statement.
    @Test func aTransactionOverTheBatchBytesWritesItsReportsInSeveralStatements() async throws {
        var config = TestEnvironment.configuration()
        config.maxBatchBytes = 4_000
        let p = try await makeProject(config)
        let reports = try Self.decoded(Self.reports(seed: 6))
        try await withTestDatabase(config) { db in
            let project = try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(p.ingestKey))?.project)
            let items = reports.map { IngestItem(project: project, report: $0) }
            let parts = PostgresIngestStore.statementParts(items, maxBytes: PostgresIngestStore(database: db).maxStatementBytes)
            #expect(parts.count > 10, "\(parts.count) statements: the test must split the reports")
            #expect(try await PostgresIngestStore(database: db).store(items, gate: CommitGate()) == Set(items.map(\.key)))
            #expect(Set(try await db.storedReportIDs(slug: p.project)) == Set(reports.map(\.id)))
            #expect(try await db.rollupTotal(slug: p.project) == Int64(items.count))
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    /// The cut: in order, every item once, each run within the bytes unless one item alone is
    /// over them, and one run when everything fits.
    @Test func statementPartsCoverTheItemsInOrderWithinTheBytes() throws {
        let project = ProjectRef(id: 1, slug: "p", groupingVersion: .v2)
        let items = try Self.decoded(Self.reports(seed: 7)).enumerated().map { i, report in
            var report = report
            if i % 17 == 0 { report.reason += String(repeating: "x", count: 3_000) }  // alone over the bound
            return IngestItem(project: project, report: report)
        }
        let sizes = items.map(\.estimatedBytes)
        for bound in [1, 700, 2_000, 10_000] {
            let parts = PostgresIngestStore.statementParts(items, maxBytes: bound)
            #expect(parts.flatMap { Array($0) } == Array(items.indices), "bound \(bound)")
            for part in parts {
                #expect(!part.isEmpty)
                #expect(part.count == 1 || sizes[part].reduce(0, +) <= bound, "bound \(bound): \(part)")
            }
            // Runs are as long as the bound lets them be: the next item did not fit.
            for (part, next) in zip(parts, parts.dropFirst()) {
                #expect(sizes[part].reduce(0, +) + sizes[next.lowerBound] > bound, "bound \(bound): \(part)")
            }
        }
        #expect(PostgresIngestStore.statementParts(items, maxBytes: sizes.reduce(0, +)) == [items.indices])
        #expect(PostgresIngestStore.statementParts([], maxBytes: 1) == [0..<0])
    }

    /// A group that another transaction creates while this one runs (another replica storing
    /// the same new crash): this transaction's upsert waits for it, then counts the committed
    /// row once, with its reports and rollups.
    @Test func aGroupCreatedByAnotherTransactionMeanwhileIsCountedOnce() async throws {
        let p = try await makeProject()
        let reports = try Self.decoded(Self.reports(seed: 5))
        try await withTestDatabase { db in
            let project = try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(p.ingestKey))?.project)
            let items = reports.map { IngestItem(project: project, report: $0) }
            let late = items[0]
            let store = try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                try await connection.query(
                    """
                    INSERT INTO crash_groups (project_id, signature, grouping_version, kind, title, normalized_reason, first_seen, last_seen)
                    VALUES (\(late.projectID), \(late.signature.hash), \(late.signature.version.rawValue), \(late.report.kind.rawValue),
                            \(late.signature.title), \(late.signature.normalizedReason), \(late.report.timestamp), \(late.report.timestamp))
                    """, logger: TestEnvironment.logger)
                let store = Task { try await PostgresIngestStore(database: db).store(items, gate: CommitGate()) }
                // Commit only once the ingest transaction waits on this uncommitted group.
                try await waitUntil("the ingest transaction waits on the uncommitted group") {
                    try await db.ingestTransactionsWaitingOnLocks() > 0
                }
                return store
            }
            #expect(try await store.value == Set(items.map(\.key)))
            #expect(try await db.rollupTotal(slug: p.project) == Int64(items.count))
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    /// Single reports of many groups, each sent once or twice at once, with one id sent again
    /// with another reason (another group) at the same time, through two lanes: the lanes
    /// commit at once and store each id once; every rollup is its definition.
    @Test func singleReportsInTwoLanesAtOnceAreStoredAndCountedOnce() async throws {
        var config = TestEnvironment.configuration()
        config.ingestLanes = 2
        let p = try await makeProject(config)
        // Two dozen reasons (an identifier's digits stay; the rollup reports' own reasons differ
        // only in numbers, so in four groups, all in one lane one run in eight).
        let reports = Self.reports(seed: 6).enumerated().map { index, report in
            var object = report.object
            object["reason"] = "LaneBug\(index % 24) crashed"
            return TestReport(object: object)
        }
        // The test means something only if the reports' groups fall in both lanes: 24 groups
        // all fall in one lane about once in eight million runs.
        let decoded = try Self.decoded(reports)
        let lanes = try await withTestDatabase { db in
            let project = try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(p.ingestKey))?.project)
            return Set(decoded.map { IngestLanes.lane(of: [IngestItem(project: project, report: $0)], lanes: 2) })
        }
        #expect(lanes == [0, 1])
        var reused = reports[0].object
        reused["reason"] = "another group, the same id"
        let requests = reports.map(\.object) + reports.prefix(60).map(\.object) + [reused]
        let bodies = requests.map { batchBody([$0]) }
        try await withApp(config) { client in
            let answers = try await withThrowingTaskGroup(of: IngestResponse.self) { group in
                for body in bodies {
                    group.addTask {
                        let response = try await client.ingest(key: p.ingestKey, body: body)
                        #expect(response.status == .accepted)
                        return try response.decode(IngestResponse.self)
                    }
                }
                return try await group.reduce(into: [IngestResponse]()) { $0.append($1) }
            }
            #expect(answers.count == bodies.count)
            #expect(answers.reduce(0) { $0 + $1.accepted } == reports.count)
            #expect(answers.reduce(0) { $0 + $1.duplicates } == 61)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: p.project).count == reports.count)
            #expect(try await db.rollupTotal(slug: p.project) == Int64(reports.count))
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    /// `reports` as the server reads them.
    static func decoded(_ reports: [TestReport]) throws -> [Report] {
        let decoder = JSONDecoder.crashWire()
        return try reports.map { try decoder.decode(Report.self, from: JSONSerialization.data(withJSONObject: $0.object)) }
    }

    /// Compares every rollup table of project `slug` with its definition, once the aggregator
    /// has folded every pending fact.
    static func expectRollupsMatch(
        slug project: String, _ config: ServerConfiguration = TestEnvironment.configuration()
    ) async throws {
        let results = try await withTestDatabase(config) { db in
            try await db.aggregateRollups()
            return try await db.client.withConnection { connection in
                // Another session time zone must not move the buckets.
                try await connection.query("SET TimeZone = 'Pacific/Chatham'", logger: TestEnvironment.logger)
                var id: Int64 = 0
                let rows = try await connection.query("SELECT id FROM projects WHERE slug = \(project)", logger: TestEnvironment.logger)
                for try await value in rows.decode(Int64.self) { id = value }
                var out: [Comparison] = []
                for rollup in Self.rollups {
                    var binds = PostgresBindings()
                    binds.append(id)
                    let sql = """
                        WITH written AS (\(rollup.written)), derived AS (\(rollup.derived))
                        SELECT (SELECT count(*) FROM derived), (SELECT count(*) FROM written),
                               (SELECT count(*) FROM (SELECT * FROM derived EXCEPT ALL SELECT * FROM written) a)
                             + (SELECT count(*) FROM (SELECT * FROM written EXCEPT ALL SELECT * FROM derived) b)
                        """
                    let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: TestEnvironment.logger)
                    for try await (derived, written, different) in rows.decode((Int64, Int64, Int64).self) {
                        out.append(Comparison(table: rollup.table, derived: derived, written: written, different: different))
                    }
                }
                return out
            }
        }
        #expect(results.map { $0.table } == Self.rollups.map(\.table))
        for result in results {
            // Every table has rows (the check is not vacuous) and no row differs.
            #expect(result.derived > 0 && result.written == result.derived && result.different == 0, "\(result)")
        }
    }
}
