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
        while !connection.isClosed { try await Task.sleep(for: .milliseconds(10)) }
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
