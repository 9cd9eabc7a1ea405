import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO
import SeededRandom
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The rollup aggregator (docs/server.md, "The rollup aggregator"): ingest appends rollup facts,
/// cycles fold them. Whatever the interleaving of commits, cycles, interrupted cycles, servers
/// and erasures, the rollups end exactly equal to their definitions over the stored reports, and
/// a query answered after a 202 counts that report.
extension RollupEquivalenceTests {
    /// A project's stored reports, and what its hourly rollup and its pending facts count.
    struct Accounts: Equatable, CustomStringConvertible {
        var stored: Int64, folded: Int64, pending: Int64
        init(_ stored: Int64, _ folded: Int64, _ pending: Int64) { (self.stored, self.folded, self.pending) = (stored, folded, pending) }
        init(_ stored: Int, _ folded: Int, _ pending: Int) { self.init(Int64(stored), Int64(folded), Int64(pending)) }
        var description: String { "\(stored) stored, \(folded) folded, \(pending) pending" }
    }

    /// The project's accounts, in one statement: each report is pending or folded, never both,
    /// never neither.
    static func accounts(_ project: Int64, _ db: CrashDatabase) async throws -> Accounts {
        let rows = try await db.client.query(
            """
            SELECT (SELECT count(*) FROM reports WHERE project_id = \(project)),
                   (SELECT COALESCE(sum(count), 0)::bigint FROM group_hourly WHERE project_id = \(project)),
                   (SELECT COALESCE(sum(reports), 0)::bigint FROM rollup_pending WHERE project_id = \(project))
            """, logger: TestEnvironment.logger)
        for try await (stored, folded, pending) in rows.decode((Int64, Int64, Int64).self) { return Accounts(stored, folded, pending) }
        return Accounts(0, 0, 0)
    }

    static func projectRef(_ credentials: ProjectCredentials, _ db: CrashDatabase) async throws -> ProjectRef {
        try #require(try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(credentials.ingestKey))?.project)
    }

    /// Batches of random sizes (a retried one among them) committed concurrently with cycles of
    /// random small bounds, in an order drawn from a seed: after every step each stored report
    /// is either folded or pending, and once everything is folded every rollup is its
    /// definition.
    @Test(arguments: [UInt64(1), 2, 3])
    func randomInterleavingsOfCommitsAndCyclesCountEachReportOnce(seed: UInt64) async throws {
        let p = try await makeProject()
        let reports = try Self.decoded(Self.reports(seed: Int(seed) + 20))
        try await withTestDatabase { db in
            var random = SplitMix64(seed: seed)
            let project = try await Self.projectRef(p, db)
            let items = reports.map { IngestItem(project: project, report: $0) }
            var offset = 0
            var steps = 0
            while offset < items.count {
                let size = min(items.count - offset, Int.random(in: 1...30, using: &random))
                let batch = Array(items[offset..<offset + size])
                var bounded = PostgresRollupStore(database: db)
                (bounded.cycleRows, bounded.cycleReports) = (Int.random(in: 1...4, using: &random), Int.random(in: 1...60, using: &random))
                let store = bounded
                // A commit and a cycle at once, or one after the other in either order.
                switch Int.random(in: 0..<3, using: &random) {
                case 0:
                    async let stored = PostgresIngestStore(database: db).store(batch, gate: CommitGate())
                    async let cycle = store.aggregate()
                    _ = try await (stored, cycle)
                case 1:
                    _ = try await store.aggregate()
                    _ = try await PostgresIngestStore(database: db).store(batch, gate: CommitGate())
                default:
                    _ = try await PostgresIngestStore(database: db).store(batch, gate: CommitGate())
                    if Bool.random(using: &random) { _ = try await store.aggregate() }
                }
                // A retried batch is stored and counted nowhere again.
                if steps == 2 { #expect(try await PostgresIngestStore(database: db).store(batch, gate: CommitGate()).isEmpty) }
                offset += size
                steps += 1
                let now = try await Self.accounts(project.id, db)
                #expect(now.stored == Int64(offset) && now.folded + now.pending == now.stored, "seed \(seed), step \(steps): \(now)")
            }
            try await db.aggregateRollups()
            #expect(try await Self.accounts(project.id, db) == Accounts(items.count, items.count, 0))
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    struct Interrupted: Error {}

    /// A cycle interrupted after it took its rows (an error thrown, or its PostgreSQL backend
    /// ended, as in a restart: its transaction rolls back) leaves them pending and the rollups
    /// untouched; an aggregator of another server (another pool) then folds them once. The cycle
    /// whose backend ended returns a connection error: the driver never answers the statement it
    /// writes next, and a cycle waiting for it would hold the gate of every reader behind it.
    @Test func aCycleInterruptedAfterTakingItsRowsLeavesThemForTheNext() async throws {
        // A database of its own: the cycles of tests running beside it would fold its rows.
        try await withPrivateDatabase("crashguard_rollups") { config in try await Self.interruptedCycles(config) }
    }

    static func interruptedCycles(_ config: ServerConfiguration) async throws {
        let p = try await makeProject(config)
        let reports = try Self.decoded(Self.reports(seed: 31))
        try await withTestDatabase(config) { db in
            let project = try await Self.projectRef(p, db)
            let items = reports.map { IngestItem(project: project, report: $0) }
            for part in stride(from: 0, to: items.count, by: 45) {
                _ = try await PostgresIngestStore(database: db).store(Array(items[part..<min(part + 45, items.count)]), gate: CommitGate())
            }
            var twoRows = PostgresRollupStore(database: db)
            twoRows.cycleRows = 2
            let store = twoRows
            // Fold the first two batches, so the interrupted cycles meet existing rows.
            #expect(try await store.aggregate() == .folded(rows: 2, reports: 90, full: true))
            let before = try await Self.accounts(project.id, db)
            #expect(before == Accounts(items.count, 90, items.count - 90))
            // The error comes back inside the transaction's (TransactionError).
            await #expect(throws: (any Error).self) {
                _ = try await store.aggregate(afterTaking: { _ in throw Interrupted() })
            }
            let ended = try await withDeadline(.seconds(30)) { () -> String? in
                do {
                    _ = try await store.aggregate(afterTaking: { connection in
                        // Its rows read, so the FATAL error ends the cycle here: no statement is
                        // written after it (one written as the channel closes is never answered).
                        for try await _ in try await connection.query(
                            "SELECT pg_terminate_backend(pg_backend_pid())", logger: TestEnvironment.logger)
                        {}
                    })
                    return nil
                } catch {
                    return isConnectionError(error) ? "connection error" : "\(error)"
                }
            }
            #expect(ended == "connection error")
            #expect(try await Self.accounts(project.id, db) == before)
        }
        // Another server resumes.
        try await withTestDatabase(config) { db in
            let project = try await Self.projectRef(p, db)
            #expect(
                try await RollupAggregator(
                    store: PostgresRollupStore(database: db), cycles: db.rollupCycles, schemaApplied: db.schemaApplied, interval: .seconds(1),
                    logger: TestEnvironment.logger
                ).catchUp() != .standby)
            #expect(try await Self.accounts(project.id, db) == Accounts(reports.count, reports.count, 0))
        }
        try await Self.expectRollupsMatch(slug: p.project, config)
    }

    /// Two servers on one database: while one holds the aggregator's lock (in the middle of a
    /// cycle), the other's cycle stands by; its reader with a budget stops waiting at it and still
    /// counts the pending reports in the list, and its reader without one waits until the first
    /// has folded the reader's reports; then both fold concurrently with commits, and every rollup
    /// is exact.
    @Test func twoServersFoldEachReportOnce() async throws {
        try await withPrivateDatabase("crashguard_rollups") { config in try await Self.twoServers(config) }
    }

    static func twoServers(_ config: ServerConfiguration) async throws {
        let p = try await makeProject(config)
        let reports = try Self.decoded(Self.reports(seed: 41))
        try await withTestDatabase(config) { one in
            try await withTestDatabase(config) { two in
                let project = try await Self.projectRef(p, one)
                let items = reports.map { IngestItem(project: project, report: $0) }
                _ = try await PostgresIngestStore(database: one).store(Array(items[0..<60]), gate: CommitGate())
                let (took, release) = (AsyncStream<Void>.makeStream(), AsyncStream<Void>.makeStream())
                let holder = Task {
                    try await PostgresRollupStore(database: one).aggregate(afterTaking: { _ in
                        took.continuation.yield()
                        for await _ in release.stream { break }
                    })
                }
                for await _ in took.stream { break }
                #expect(try await PostgresRollupStore(database: two).aggregate() == .standby)
                // A request's reader waits at most its budget, then reads the rollups as they
                // stand; the list's window counts still hold every pending report.
                #expect(try await two.rollupFreshness.awaitFolded(project: project.id, atMost: .milliseconds(200)) == false)
                #expect(two.rollupCycles.expiredWaitCount == 1)
                let first = reports.map(\.timestamp).min()!, last = reports.map(\.timestamp).max()!
                let listed = try await PostgresQueryStore(database: two).read { reader in
                    try await reader.windowCounts(
                        project: project.id, ids: nil, window: TimeWindow(from: first, to: last.addingTimeInterval(1)),
                        filters: GroupFilters(), snapshot: nil)
                }
                #expect(listed.values.reduce(0, +) == 60)
                // The second server's reader waits for the first server's cycle.
                let reader = Task { try await two.rollupFreshness.awaitFolded(project: project.id) }
                #expect(try await Self.accounts(project.id, two).pending == 60)
                release.continuation.yield()
                #expect(try await holder.value == .folded(rows: 1, reports: 60, full: false))
                try await reader.value
                #expect(try await Self.accounts(project.id, two) == Accounts(60, 60, 0))
                // Both servers' aggregators and readers, beside the commits of the rest.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, start) in stride(from: 60, to: items.count, by: 20).enumerated() {
                        let batch = Array(items[start..<min(start + 20, items.count)])
                        let db = index % 2 == 0 ? one : two
                        group.addTask { _ = try await PostgresIngestStore(database: db).store(batch, gate: CommitGate()) }
                        group.addTask { _ = try await PostgresRollupStore(database: index % 2 == 0 ? two : one).aggregate() }
                        group.addTask { try await db.rollupFreshness.awaitFolded(project: project.id) }
                    }
                    try await group.waitForAll()
                }
                try await one.aggregateRollups()
                #expect(try await Self.accounts(project.id, one) == Accounts(items.count, items.count, 0))
            }
        }
        try await Self.expectRollupsMatch(slug: p.project, config)
    }

    /// A query right after the 202 counts the report, while the server's aggregator would not
    /// run for an hour: the query folds the project's pending facts first.
    @Test func aQueryAfterTheAcceptCountsTheReport() async throws {
        try await withPrivateDatabase("crashguard_rollups") { config in
            var idle = config
            idle.rollupInterval = .seconds(3600)
            try await Self.readYourWrites(idle)
        }
    }

    static func readYourWrites(_ config: ServerConfiguration) async throws {
        let p = try await makeProject(config)
        let now = Date()
        let reports = (0..<7).map { i in
            queryReport("ReadYourWrites\(i % 2) crashed", at: now.addingTimeInterval(Double(-i) * 60), device: "device-\(i % 3)")
        }
        try await withApp(config) { client in
            try await client.send(Array(reports.prefix(3)), key: p.ingestKey)
            try await withTestDatabase(config) { db in
                let project = try await Self.projectRef(p, db)
                #expect(try await Self.accounts(project.id, db) == Accounts(3, 0, 3), "the reports must be pending for the test to mean anything")
            }
            let first = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(first.status == .ok)
            #expect(Self.values("count", in: first.json["groups"]).reduce(0, +) == 3)
            try await client.send(Array(reports.dropFirst(3)), key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(Self.values("count", in: list.json["groups"]).sorted() == [3, 4])
            #expect(Self.values("devices", in: list.json["groups"]).sorted() == [3, 3])
            let stats = try await client.query("/v1/projects/\(p.project)/stats?interval=hour", token: p.readToken)
            let series = stats.json["series"] as? [[String: Any]] ?? []
            #expect(Self.values("count", in: series.first?["points"]).reduce(0, +) == 7)
        }
    }

    /// A window whose edge is counted as its whole hour minus the reports outside it
    /// (``TimeWindow/widenedToHours(now:)``) counts each report inside once, folded or pending:
    /// the pending read adds the pending reports of the widened window, the subtraction takes
    /// away every report outside it.
    @Test func widenedEdgesCountFoldedAndPendingReportsOnce() async throws {
        let p = try await makeProject()
        let reports = try Self.decoded(Self.reports(seed: 61))
        try await withTestDatabase { db in
            let project = try await Self.storeHalfFolded(reports, of: p, db)
            #expect(try await Self.accounts(project.id, db) == Accounts(180, 90, 90), "half of them must be pending")
            // From 20 minutes past an hour (widened) or 50 (raw), to 10 minutes past (raw) or 40 (widened).
            let midnight = utcMidnight(daysAgo: 1)
            let windows = [(-2400.0, 7800.0), (-600.0, 9600.0), (1200.0, 11_400.0)].map {
                TimeWindow(from: midnight.addingTimeInterval($0.0), to: midnight.addingTimeInterval($0.1))
            }
            #expect(windows.map { !$0.widenedToHours(now: Date()).outside.isEmpty } == [true, true, true])
            for folded in [false, true] {
                if folded { try await db.aggregateRollups() }
                for window in windows {
                    let counts = try await PostgresQueryStore(database: db).read { reader in
                        try await reader.windowCounts(project: project.id, ids: nil, window: window, filters: GroupFilters(), snapshot: nil)
                    }
                    let inside = reports.filter { $0.timestamp >= window.from && $0.timestamp < window.to }.count
                    #expect(counts.values.reduce(0, +) == Int64(inside), "\(window), folded: \(folded)")
                }
            }
        }
    }

    /// Stores `reports` into `p`'s project in two commits with a cycle between them: the first
    /// 90 folded, the rest pending.
    static func storeHalfFolded(_ reports: [Report], of p: ProjectCredentials, _ db: CrashDatabase) async throws -> ProjectRef {
        let project = try await projectRef(p, db)
        let items = reports.map { IngestItem(project: project, report: $0) }
        _ = try await PostgresIngestStore(database: db).store(Array(items[0..<90]), gate: CommitGate())
        try await db.aggregateRollups()
        _ = try await PostgresIngestStore(database: db).store(Array(items[90...]), gate: CommitGate())
        return project
    }

    /// The integers at `key` of a JSON array of objects.
    static func values(_ key: String, in array: Any?) -> [Int] {
        let objects = array as? [[String: Any]] ?? []
        return objects.compactMap { $0[key] as? Int }
    }

    /// Reports erased while their facts are still pending: the eraser folds the project's
    /// pending facts before it subtracts, so nothing is subtracted that was not added and no
    /// later cycle adds the erased reports.
    @Test func erasingReportsWhoseFactsArePendingKeepsTheRollupsExact() async throws {
        let p = try await makeProject()
        let reports = try Self.decoded(Self.reports(seed: 51))
        try await withTestDatabase { db in
            let project = try await Self.storeHalfFolded(reports, of: p, db)
            // Every fifth report, folded ones and pending ones, by key.
            let gone = stride(from: 0, to: reports.count, by: 5).map { ReportEraser.Key(ts: reports[$0].timestamp, id: reports[$0].id) }
            let outcome = try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                try await ReportEraser(logger: TestEnvironment.logger).erase(project: project.id, keys: gone, on: connection)
            }
            #expect(outcome.reports == gone.count)
            let kept = reports.count - gone.count
            #expect(try await Self.accounts(project.id, db) == Accounts(kept, kept, 0))
            try await db.aggregateRollups()
            #expect(try await Self.accounts(project.id, db) == Accounts(kept, kept, 0))
        }
        try await Self.expectRollupsMatch(slug: p.project)
    }

    /// The facts encoding gives back exactly what it was given.
    @Test func factsDecodeAsEncoded() throws {
        let facts = (0..<50).map { (i: Int) -> RollupFact in
            let time = Date(timeIntervalSince1970: 1_800_000_000.123_456_7 + Double(i) / 10)
            let os: String = i % 4 == 0 ? "" : "iOS"
            let device: String = i % 6 == 0 ? "" : "device-é-\(i % 9)"
            return RollupFact(
                project: 7, group: Int64(i % 4), time: time, fatal: i % 3 == 0, app: "com.example.\(i % 2)", version: "1.\(i % 5)",
                os: os, model: "iPhone14,2", kind: "signal", environment: "production", device: device)
        }
        var decoded: [RollupFact] = []
        try RollupFacts.decode(RollupFacts.encode(facts), project: 7, into: &decoded)
        #expect(decoded == facts)
        #expect(throws: RollupFactsError.self) { try RollupFacts.decode(ByteBuffer(bytes: [2, 0]), project: 7, into: &decoded) }
    }
}
