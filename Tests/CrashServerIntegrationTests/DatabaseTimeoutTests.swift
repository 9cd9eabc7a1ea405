import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// PostgreSQL's own timeouts end an ingest transaction stuck behind a row lock before the
/// server's deadline does: the 503 means rolled back, for that batch only.
@Suite(.serialized) struct DatabaseTimeoutTests {
    /// Deadline 4 s: the ingest transaction's lock and statement timeouts are 2 s.
    let config = TestEnvironment.configuration { $0.databaseTimeout = .seconds(4) }

    /// The ids stored for project `slug`.
    func stored(_ slug: String) async throws -> Set<UUID> {
        Set(try await withTestDatabase(config) { try await $0.storedReportIDs(slug: slug) })
    }

    /// The ingest pool's sessions start with the transaction's settings (no statement sets
    /// them per commit); the main pool's sessions, which serve queries and upkeep, keep
    /// PostgreSQL's defaults.
    @Test func onlyTheIngestPoolsSessionsCarryTheIngestTimeouts() async throws {
        try await withTestDatabase(config) { db in
            func read(_ client: PostgresClient) async throws -> String {
                let rows = try await client.query(
                    """
                    SELECT concat_ws(' ', current_setting('lock_timeout'), current_setting('statement_timeout'),
                        current_setting('idle_in_transaction_session_timeout'), current_setting('plan_cache_mode'),
                        current_setting('enable_seqscan'), current_setting('application_name'))
                    """, logger: TestEnvironment.logger)
                for try await value in rows.decode(String.self) { return value }
                return ""
            }
            let ingest = try await read(db.ingestClient)
            let other = try await read(db.client)
            #expect(ingest == "2s 2s 4s force_generic_plan off crash-server ingest")
            #expect(other == "0 0 0 auto on crash-server")
        }
    }

    @Test func rowLockHeldPastTheTimeoutIs503BusyNothingStoredAndTheDatabaseStaysUp() async throws {
        let blocked = try await makeProject(config)
        let other = try await makeProject(config)
        let first = UUID()
        let refusedID = UUID()
        let config = config
        try await withApp(config) { client in
            // The group's row exists; another session then holds it, as a slow transaction would.
            #expect(try await client.ingest(key: blocked.ingestKey, body: batchBody([reportJSON(id: first)])).status == .accepted)
            try await withGroupRowsLocked(config, slug: blocked.project) { _ in
                let refused = try await client.ingest(key: blocked.ingestKey, body: batchBody([reportJSON(id: refusedID)]))
                #expect(refused.status == .serviceUnavailable)
                #expect(refused.headers[.retryAfter].flatMap(Int.init) != nil)
                #expect(refused.errorMessage?.contains("busy") == true, "\(refused.errorMessage ?? "-")")
                // Not marked unreachable: another project is served while the lock is still held.
                let elsewhere = try await client.ingest(key: other.ingestKey, body: batchBody([reportJSON()]))
                #expect(elsewhere.status == .accepted)
                #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
                // Hold the lock past the server's deadline too.
                try await Task.sleep(for: .seconds(3))
            }
            // Lock released: nothing of the refused request committed after its 503.
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await stored(blocked.project) == [first])

            let retry = try await client.ingest(key: blocked.ingestKey, body: batchBody([reportJSON(id: refusedID)]))
            #expect(retry.status == .accepted)
            #expect(try retry.decode(IngestResponse.self).accepted == 1)
            #expect(try await stored(blocked.project) == [first, refusedID])
        }
    }

    @Test func rowLockReleasedWithinTheTimeoutIs202AndStored() async throws {
        // Lock timeout 10 s: the wait is seen and the lock released well within it, however
        // busy the machine.
        let config = TestEnvironment.configuration { $0.databaseTimeout = .seconds(20) }
        let project = try await makeProject(config)
        let first = UUID()
        let waiting = UUID()
        try await withApp(config) { client in
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(id: first)])).status == .accepted)
            let request = try await withGroupRowsLocked(config, slug: project.project) { db in
                let request = Task { try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(id: waiting)])) }
                // Released as soon as the ingest transaction waits on the lock.
                try await waitUntil("the ingest transaction waits on the group's row lock") {
                    try await db.ingestTransactionsWaitingOnLocks() > 0
                }
                return request
            }
            let response = try await request.value
            #expect(response.status == .accepted)
            #expect(try response.decode(IngestResponse.self).accepted == 1)
            #expect(try await stored(project.project) == [first, waiting])
        }
    }

    /// The ingest statements are prepared once per connection (``FixedStatement``), and a
    /// statement PostgreSQL refused to prepare stays refused on that connection. Preparing can
    /// time out on a table lock (parse analysis locks the tables it names): that batch is 503,
    /// and once the lock is gone the next one is stored, on a fresh connection.
    @Test func aStatementThatTimedOutWhilePreparingDoesNotStickToItsConnection() async throws {
        let project = try await makeProject(config)
        let refusedID = UUID()
        let config = config
        try await withApp(config) { client in
            // A fresh server: its first ingest prepares the statements, behind the table lock.
            try await withTestDatabase(config) { db in
                try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                    try await connection.query("LOCK TABLE report_ids IN ACCESS EXCLUSIVE MODE", logger: TestEnvironment.logger)
                    let refused = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(id: refusedID)]))
                    #expect(refused.status == .serviceUnavailable)
                    #expect(refused.errorMessage?.contains("busy") == true, "\(refused.errorMessage ?? "-")")
                }
            }
            for _ in 0..<3 {
                let retry = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(id: refusedID)]))
                #expect(retry.status == .accepted, "\(retry.errorMessage ?? "-")")
            }
            #expect(try await stored(project.project) == [refusedID])
        }
    }

    /// A measurement, not a timed assertion: how long one batch at the default byte bound,
    /// made of the largest reports the contract allows, takes to store. It must stay well
    /// under the default statement timeout (5 s) for the default bound to make sense
    /// (docs/server.md, "Batch bytes"); the test only checks that it is stored.
    @Test func aBatchAtTheDefaultByteBoundOfTheLargestReports() async throws {
        let config = TestEnvironment.configuration()  // deadline 60 s: this measures, it does not judge
        let project = try await makeProject(config)
        let bound = ServerConfiguration().maxBatchBytes
        try await withTestDatabase(config) { db in
            let rows = try await db.client.query("SELECT id FROM projects WHERE slug = \(project.project)", logger: TestEnvironment.logger)
            var projectID: Int64 = 0
            for try await id in rows.decode(Int64.self) { projectID = id }
            var items: [IngestItem] = []
            var bytes = 0
            while true {
                let n = items.count
                let report = Report(
                    kind: .exception, reason: "reason \(n) " + String(repeating: "r", count: 8000),
                    stack: (0..<256).map { "\($0) Demo 0x\(n) " + String(repeating: "f", count: 1000) },
                    app: AppInfo(id: "com.example.demo", version: "1.0.0"),
                    context: Dictionary(uniqueKeysWithValues: (0..<64).map { ("key\($0)", String(repeating: "v", count: 1024)) }))
                let item = IngestItem(
                    projectID: projectID, report: report,
                    signature: Grouping.signature(kind: .exception, reason: report.reason, stack: report.stack, fingerprint: nil, version: .v1))
                guard bytes + item.estimatedBytes <= bound else { break }
                items.append(item)
                bytes += item.estimatedBytes
            }
            let batch = items
            let started = ContinuousClock.now
            let fresh = try await PostgresIngestStore(database: db).store(batch, gate: CommitGate())
            let elapsed = ContinuousClock.now - started
            #expect(fresh.count == batch.count)
            let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
            print("MEASURE batch at the byte bound: \(batch.count) reports, \(bytes) estimated bytes, stored in \(elapsed) (load average \(load))")
        }
    }
}

/// Runs `body` while another session holds the `crash_groups` rows of project `slug`
/// `FOR UPDATE`, as a slow transaction of another replica would; `body` gets a database
/// (another connection) to look with.
func withGroupRowsLocked<T: Sendable>(
    _ config: ServerConfiguration, slug: String, _ body: @escaping @Sendable (CrashDatabase) async throws -> T
) async throws -> T {
    try await withTestDatabase(config) { db in
        try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
            let rows = try await connection.query(
                "SELECT g.id FROM crash_groups g JOIN projects p ON p.id = g.project_id WHERE p.slug = \(slug) FOR UPDATE OF g",
                logger: TestEnvironment.logger)
            var locked = 0
            for try await _ in rows.decode(Int64.self) { locked += 1 }
            #expect(locked > 0)
            return try await body(db)
        }
    }
}

extension CrashDatabase {
    /// Sessions of the server waiting on a lock.
    func ingestTransactionsWaitingOnLocks() async throws -> Int {
        let rows = try await client.query(
            """
            SELECT count(*)::int FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = \(IngestTimeouts.applicationName) AND wait_event_type = 'Lock'
            """, logger: logger)
        for try await n in rows.decode(Int.self) { return n }
        return 0
    }
}
