import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// A connection PostgreSQL closes between two statements (a restart): PostgresNIO never
/// answers the next statement written to it, so the server's transactions and read snapshots
/// end with a connection error instead (``endingOnConnectionClose(whenCancelled:grace:_:)``).
@Suite struct ClosedConnectionTests {
    /// Ends the backend of `connection` and waits until the driver has seen the channel close,
    /// so the next statement is written to a closed channel.
    static func terminate(_ connection: PostgresConnection) async throws {
        try await connection.query("SELECT pg_terminate_backend(pg_backend_pid())", logger: TestEnvironment.logger)
        try await waitUntil("the driver sees the ended backend's channel close", every: .milliseconds(10)) { connection.isClosed }
        try await Task.sleep(for: .milliseconds(50))
    }

    /// What the call ended with, within 30 s: the driver alone waits forever.
    static func outcome(_ call: @escaping @Sendable () async throws -> Void) async throws -> String {
        try await withDeadline(.seconds(30)) { () -> String in
            do {
                try await call()
                return "answered"
            } catch {
                return isConnectionError(error) ? "connection error" : "\(error)"
            }
        }
    }

    @Test func aReadSnapshotWhoseConnectionClosesEndsWithAConnectionError() async throws {
        try await withTestDatabase { db in
            let ended = try await Self.outcome {
                _ = try await db.withReadSnapshot { connection in
                    try await Self.terminate(connection)
                    return try await connection.query("SELECT 1", logger: TestEnvironment.logger).collect().count
                }
            }
            #expect(ended == "connection error")
            // The pool serves the next read on a fresh connection.
            #expect(try await db.withReadSnapshot { try await $0.query("SELECT 1", logger: TestEnvironment.logger).collect().count } == 1)
        }
    }

    @Test func aTransactionWhoseConnectionClosesEndsWithAConnectionError() async throws {
        try await withTestDatabase { db in
            let ended = try await Self.outcome {
                try await db.client.withTransactionEndingOnClose(logger: TestEnvironment.logger) { connection in
                    try await Self.terminate(connection)
                    try await connection.query("SELECT 1", logger: TestEnvironment.logger)
                }
            }
            #expect(ended == "connection error")
        }
    }

    /// A batch's `COMMIT` written after its connection closed never reached PostgreSQL: the
    /// batch ends with a connection error (503), not "outcome unknown" (500), and nothing of it
    /// is stored.
    @Test func anIngestCommitWrittenToAClosedConnectionEndsWithAConnectionError() async throws {
        let project = try await makeProject()
        let reports = try RollupEquivalenceTests.decoded(RollupEquivalenceTests.reports(seed: 7)).prefix(5)
        try await withTestDatabase { db in
            let owner = try #require(
                try await PostgresProjectStore(database: db).owner(ingestKeyHash: ProjectKeys.hash(project.ingestKey))?.project)
            let items = reports.map { IngestItem(project: owner, report: $0) }
            let store = PostgresIngestStore(database: db, beforeCommit: Self.terminate)
            let ended = try await withDeadline(.seconds(30)) { () -> String in
                do {
                    _ = try await store.store(items, gate: CommitGate())
                    return "answered"
                } catch {
                    return "\(type(of: error))"
                }
            }
            #expect(ended == "ConnectionClosedMidTransaction")
            #expect(try await db.storedReportIDs(slug: project.project).isEmpty)
        }
    }

    /// The server's pools (the connections they keep included) with room for one connection
    /// (`CRASHGUARD_DB_POOL_SIZE=1`), without the migration: these tests need no tables.
    static func withPoolOfOne<T: Sendable>(_ body: @Sendable (CrashDatabase) async throws -> T) async throws -> T {
        try await withDatabase(
            TestEnvironment.configuration { $0.databasePoolSize = 1 }, logger: TestEnvironment.logger,
            minimumConnections: CrashDatabase.keptConnections, body)
    }

    /// A transaction whose connection PostgreSQL closes between two statements stays parked on
    /// the dropped statement for good, but the pool lets go of that connection when it closes: a
    /// pool of one, with three transactions parked so, still serves the next at once.
    @Test func transactionsParkedOnClosedConnectionsLeaveThePoolItsConnections() async throws {
        try await Self.withPoolOfOne { db in
            let outcomes = try await withDeadline(.seconds(2)) { () -> [String] in
                var parked: [Task<String, any Error>] = []
                for _ in 0..<3 {
                    let (written, writing) = AsyncStream<Void>.makeStream()
                    parked.append(
                        Task {
                            try await Self.outcome {
                                try await db.client.withTransactionEndingOnClose(logger: TestEnvironment.logger) { connection in
                                    try await Self.terminate(connection)
                                    writing.yield()
                                    try await connection.query("SELECT 1", logger: TestEnvironment.logger)
                                }
                            }
                        })
                    for await _ in written { break }
                }
                let next = try await Self.outcome {
                    try await db.client.withTransactionEndingOnClose(logger: TestEnvironment.logger) { connection in
                        _ = try await connection.query("SELECT 1", logger: TestEnvironment.logger)
                    }
                }
                var outcomes = [next]
                for task in parked { outcomes.append(try await task.value) }
                return outcomes
            }
            #expect(outcomes == ["answered"] + Array(repeating: "connection error", count: 3))
        }
    }

    /// A transaction waiting for a pool's only connection gets a new one when PostgreSQL closes
    /// that connection under the transaction holding it: PostgresNIO's pool replaces a closed
    /// connection only to keep its minimum, so the pools keep one (``CrashDatabase``).
    @Test func aTransactionWaitingForAConnectionThatClosesGetsAnother() async throws {
        try await Self.withPoolOfOne { db in
            let (leased, leasing) = AsyncStream<Void>.makeStream()
            let (queued, queuing) = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await Self.outcome {
                    try await db.client.withTransactionEndingOnClose(logger: TestEnvironment.logger) { connection in
                        leasing.yield()
                        for await _ in queued { break }
                        try await Self.terminate(connection)
                    }
                }
            }
            for await _ in leased { break }
            let waiter = Task {
                try await withDeadline(.seconds(1)) {
                    try await Self.outcome {
                        try await db.client.withTransactionEndingOnClose(logger: TestEnvironment.logger) { connection in
                            _ = try await connection.query("SELECT 1", logger: TestEnvironment.logger)
                        }
                    }
                }
            }
            // The waiter's lease request reaches the pool, and waits in its queue, well within this.
            try await Task.sleep(for: .milliseconds(100))
            queuing.yield()
            let waited: String
            do { waited = try await waiter.value } catch { waited = "\(type(of: error))" }
            #expect(waited == "answered")
            #expect(try await holder.value == "connection error")
        }
    }

    /// Start-up retries a connection error (`prepareDatabase`); a migration left to the driver
    /// would wait forever instead.
    @Test func aMigrationWhoseConnectionClosesEndsWithAConnectionError() async throws {
        try await withTestDatabase { db in
            let ended = try await Self.outcome {
                try await PostgresSchemaMaintenance(database: db).migrate(
                    statements: ["SELECT 1", "SELECT 1"], reapplyingRecordedSchema: true, afterStatement: Self.terminate)
            }
            #expect(ended == "connection error")
        }
    }
}
