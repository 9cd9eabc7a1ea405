@testable import CrashServer
import Foundation
import Testing

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
            try await db.migrate()
        }
    }
}
