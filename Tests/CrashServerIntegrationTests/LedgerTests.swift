import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The `report_ids` ledger's rows go with their reports (schema.sql): no index but its key, and a
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
                // A ledger row whose report is not in a dropped partition stays.
                try await connection.query(
                    "INSERT INTO report_ids (project_id, id) SELECT \(project), unnest(\([dropped, kept, other])::uuid[])", logger: logger)
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

    /// Reports stored in the default partition (no partition was made for their day in time)
    /// move into their day's partition when it is made, as they were, and the others stay: the
    /// day can be made at all, and the maintenance does not fail at it from then on.
    @Test func makingADayMovesItsReportsOutOfTheDefaultPartition() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let logger = TestEnvironment.logger
            let project = Int64.random(in: -1_000_000_000 ... -1)
            let (first, second, nextDay) = (UUID(), UUID(), UUID())
            let placed: [String] = try await inRolledBackTransaction(db) { connection in
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(PostgresSchemaMaintenance.partitionLockID))", logger: logger)
                let times = [
                    Date(timeIntervalSince1970: 983_700_000),  // 2001-03-04T10:00:00Z
                    Date(timeIntervalSince1970: 983_743_200),  // 2001-03-04T22:00:00Z
                    Date(timeIntervalSince1970: 983_786_400),  // 2001-03-05T10:00:00Z
                ]
                try await connection.query(
                    """
                    INSERT INTO reports (project_id, id, group_id, ts, kind, reason, app_id, app_version, device_id)
                    SELECT \(project), id, 7, ts, 'signal', 'SIGSEGV', 'app', '1.0', 'device-' || id
                    FROM unnest(\([first, second, nextDay])::uuid[], \(times)::timestamptz[]) AS x(id, ts)
                    """, logger: logger)
                func rows() async throws -> [String] {
                    let rows = try await connection.query(
                        """
                        SELECT tableoid::regclass::text || ' ' || id || ' ' || ts || ' ' || reason || ' ' || device_id || ' ' || xact
                        FROM reports WHERE project_id = \(project) ORDER BY ts
                        """, logger: logger)
                    var out: [String] = []
                    for try await row in rows.decode(String.self) { out.append(row) }
                    return out
                }
                let before = try await rows()
                #expect(before.allSatisfy { $0.hasPrefix("reports_default ") }, "\(before)")
                let made = try await connection.query(
                    "SELECT crashguard_ensure_partitions('2001-03-04', '2001-03-04')", logger: logger)
                for try await count in made.decode(Int.self) { #expect(count == 1) }
                let after = try await rows()
                // The same rows, each in its day's table or still in the default one.
                #expect(after.map { $0.drop { $0 != " " } } == before.map { $0.drop { $0 != " " } })
                return after.map { String($0.prefix { $0 != " " }) }
            }
            #expect(placed == ["reports_p20010304", "reports_p20010304", "reports_default"])
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
