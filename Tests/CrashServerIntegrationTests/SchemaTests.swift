import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

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

    /// Each function is created by one statement of schema.sql: a block that changes a function
    /// replaces its one definition (after what it reads exists) rather than defining it again.
    @Test func everyFunctionIsDefinedOnce() throws {
        let definition = try Regex(#"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([A-Za-z_0-9.]+)\s*\("#).ignoresCase()
        var count: [String: Int] = [:]
        for match in Schema.sql.matches(of: definition) {
            if let name = match.output[1].substring { count[name.lowercased(), default: 0] += 1 }
        }
        #expect(count.count >= 10)
        #expect(count.filter { $0.value > 1 }.isEmpty, "\(count.filter { $0.value > 1 })")
    }

    @Test func migrationIsIdempotent() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            try await PostgresSchemaMaintenance(database: db).migrate()
            // The recorded digest would make a second `migrate()` a no-op: run every
            // statement again on a database that already has them.
            try await PostgresSchemaMaintenance(database: db).migrate(statements: Schema.statements, reapplyingRecordedSchema: true)
        }
    }

    /// The test above can fail: a statement that is not idempotent breaks the second run.
    @Test func reapplyingRefusesANonIdempotentStatement() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let table = "not_idempotent_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            let statements = Schema.statements + ["CREATE TABLE \(table) (x int)"]
            try await PostgresSchemaMaintenance(database: db).migrate(statements: statements, reapplyingRecordedSchema: true)
            await #expect(throws: (any Error).self) {
                try await PostgresSchemaMaintenance(database: db).migrate(statements: statements, reapplyingRecordedSchema: true)
            }
            try await db.client.query(PostgresQuery(unsafeSQL: "DROP TABLE \(table)"), logger: TestEnvironment.logger)
        }
    }

    /// `stack`, `fingerprint` and `context` are `text` and compress with lz4 (docs/performance.md,
    /// "Why the code is the way it is") in the parent, every existing partition and partitions
    /// created after the migration.
    @Test func reportJSONColumnsAreTextWithLZ4InEveryPartition() async throws {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            try await db.client.query("SELECT crashguard_ensure_partitions('2099-01-01', '2099-01-01')", logger: TestEnvironment.logger)
            let rows = try await db.client.query(
                """
                SELECT a.attrelid::regclass::text, a.attname, a.attcompression::text, format_type(a.atttypid, a.atttypmod)
                FROM pg_attribute a
                WHERE a.attname IN ('stack', 'fingerprint', 'context')
                  AND (a.attrelid = 'reports'::regclass OR a.attrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'reports'::regclass))
                """, logger: TestEnvironment.logger)
            var all: Set<String> = [], notLZ4: [String] = [], notText: [String] = []
            for try await (table, column, compression, type) in rows.decode((String, String, String, String).self) {
                all.insert(table)
                if compression != "l" { notLZ4.append("\(table).\(column)") }
                if type != "text" { notText.append("\(table).\(column): \(type)") }
            }
            #expect(all.isSuperset(of: ["reports", "reports_default", "reports_p20990101"]))
            #expect(notLZ4.isEmpty, "not lz4: \(notLZ4)")
            #expect(notText.isEmpty, "not text: \(notText)")
            try await db.client.query("DROP TABLE IF EXISTS reports_p20990101", logger: TestEnvironment.logger)
        }
    }
}
