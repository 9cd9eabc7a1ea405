import Foundation
import PostgresNIO
import Testing

@testable import CrashServer

@Suite struct SchemaTests {
    @Test func splitsOnSemicolonsOutsideQuotesAndDollarQuotes() {
        let sql = """
            -- a comment; with a semicolon
            CREATE TABLE a (x text DEFAULT ';');
            CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
            BEGIN RETURN 1; END;
            $$;
            /* block; comment */ SELECT 'it''s; fine';
            """
        let statements = Schema.split(sql)
        #expect(statements.count == 3)
        #expect(statements[1].contains("BEGIN RETURN 1; END;"))
        #expect(statements[2].hasSuffix("'it''s; fine'"))
    }

    @Test func migrationIsIdempotent() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            try await db.migrate()
            // The recorded digest would make a second `migrate()` a no-op: run every
            // statement again on a database that already has them.
            try await db.migrate(statements: Schema.statements, reapplyingRecordedSchema: true)
        }
    }

    /// The test above can fail: a statement that is not idempotent breaks the second run.
    @Test func reapplyingRefusesANonIdempotentStatement() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let table = "not_idempotent_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            let statements = Schema.statements + ["CREATE TABLE \(table) (x int)"]
            try await db.migrate(statements: statements, reapplyingRecordedSchema: true)
            await #expect(throws: (any Error).self) {
                try await db.migrate(statements: statements, reapplyingRecordedSchema: true)
            }
            try await db.client.query(PostgresQuery(unsafeSQL: "DROP TABLE \(table)"), logger: TestEnvironment.logger)
        }
    }
}
