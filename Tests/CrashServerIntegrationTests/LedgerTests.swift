import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The `report_ids` ledger's rows go with their reports (schema.sql): no index on `ts`, and a
/// dropped partition takes the ledger rows of the reports still in it, and no others.
@Suite struct LedgerTests {
    @Test func droppingAPartitionDeletesTheLedgerRowsOfItsReportsOnly() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let logger = TestEnvironment.logger
            let indexes = try await db.client.query(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'report_ids'", logger: logger)
            var names: [String] = []
            for try await name in indexes.decode(String.self) { names.append(name) }
            #expect(names == ["report_ids_pkey"])

            // Year-2000 partitions, in one transaction that holds the partition maintenance's lock
            // (no server beside drops them meanwhile) and is rolled back: nothing stays behind.
            let project = Int64.random(in: -1_000_000_000 ... -1)
            let (dropped, kept, other) = (UUID(), UUID(), UUID())
            let remaining: [UUID] = try await inRolledBackTransaction(db) { connection in
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(PostgresSchemaMaintenance.partitionLockID))", logger: logger)
                try await connection.query("SELECT crashguard_ensure_partitions('2000-01-01', '2000-01-02')", logger: logger)
                let times = [
                    Date(timeIntervalSince1970: 946_720_800),  // 2000-01-01T10:00:00Z
                    Date(timeIntervalSince1970: 946_807_200),  // 2000-01-02T10:00:00Z
                ]
                try await connection.query(
                    """
                    INSERT INTO reports (project_id, id, group_id, ts, kind, reason, app_id, app_version)
                    SELECT \(project), id, 0, ts, 'signal', 'SIGSEGV', 'app', '1.0'
                    FROM unnest(\([dropped, kept])::uuid[], \(times)::timestamptz[]) AS x(id, ts)
                    """, logger: logger)
                // A ledger row whose report is not in a dropped partition stays, whatever its `ts`.
                try await connection.query(
                    """
                    INSERT INTO report_ids (project_id, id, ts)
                    SELECT \(project), id, ts FROM unnest(\([dropped, kept, other])::uuid[], \(times + [times[0]])::timestamptz[]) AS x(id, ts)
                    """, logger: logger)
                let count = try await connection.query("SELECT crashguard_drop_partitions_before('2000-01-02')", logger: logger)
                for try await n in count.decode(Int.self) { #expect(n == 1) }
                let rows = try await connection.query(
                    "SELECT id FROM report_ids WHERE project_id = \(project) ORDER BY id", logger: logger)
                var ids: [UUID] = []
                for try await id in rows.decode(UUID.self) { ids.append(id) }
                return ids
            }
            #expect(remaining == [kept, other].sorted { $0.uuidString < $1.uuidString })
        }
    }
}

/// Runs `body` in a transaction on one connection and rolls it back, so nothing it wrote is
/// ever seen by the tests beside it.
func inRolledBackTransaction<T: Sendable>(
    _ db: CrashDatabase, _ body: @Sendable (PostgresConnection) async throws -> T
) async throws -> T {
    try await db.client.withConnection { connection in
        try await connection.query("BEGIN", logger: TestEnvironment.logger)
        do {
            let result = try await body(connection)
            try await connection.query("ROLLBACK", logger: TestEnvironment.logger)
            return result
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: TestEnvironment.logger)
            throw error
        }
    }
}
