import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// ``PostgresClient/withTransactionClosingRefused(logger:_:)``: a connection on which
/// PostgreSQL refused to prepare a ``FixedStatement`` is closed (that refusal would stay with
/// it), one on which a prepared statement or any other statement failed goes back to the pool.
/// On a pool of one, the next lease's backend tells which.
@Suite struct FixedStatementTests {
    /// A key into the session's temporary table, which a test makes (or not) in its transaction.
    enum InsertKey: FixedStatement {
        static func query(_ key: Int32) -> PostgresQuery { "INSERT INTO pg_temp.fixed_statement_keys (key) VALUES (\(key))" }
        static let sql = query(0).sql
    }

    static let makeTable: PostgresQuery = "CREATE TEMP TABLE fixed_statement_keys (key int PRIMARY KEY) ON COMMIT DROP"

    /// The backend of the pool's next connection.
    static func backend(_ db: CrashDatabase) async throws -> Int32 {
        try await db.client.withConnection { connection in
            var pid: Int32 = 0
            for try await found in try await connection.query("SELECT pg_backend_pid()", logger: TestEnvironment.logger)
                .decode(Int32.self)
            {
                pid = found
            }
            return pid
        }
    }

    /// The SQLSTATE the transaction's body failed with.
    static func failure(_ db: CrashDatabase, _ body: (PostgresConnection) async throws -> Void) async -> String? {
        do {
            try await db.client.withTransactionClosingRefused(logger: TestEnvironment.logger) { try await body($0) }
            return nil
        } catch let error as TransactionError {
            return (error.closureError as? PSQLError)?.serverInfo?[.sqlState]
        } catch {
            return "\(error)"
        }
    }

    @Test func anErrorWhileAStatementRunsKeepsTheConnection() async throws {
        try await ClosedConnectionTests.withPoolOfOne { db in
            let backend = try await Self.backend(db)
            // A unique violation in a prepared statement: prepared by the first run, refused by the second.
            let duplicate = await Self.failure(db) { connection in
                try await connection.query(Self.makeTable, logger: TestEnvironment.logger)
                _ = try await connection.run(InsertKey.self, 1, logger: TestEnvironment.logger)
                _ = try await connection.run(InsertKey.self, 1, logger: TestEnvironment.logger)
            }
            #expect(duplicate == "23505")
            #expect(try await Self.backend(db) == backend)
            // And in a statement that is not prepared.
            let plain = await Self.failure(db) { connection in
                try await connection.query(Self.makeTable, logger: TestEnvironment.logger)
                try await connection.query("INSERT INTO fixed_statement_keys VALUES (1), (1)", logger: TestEnvironment.logger)
            }
            #expect(plain == "23505")
            #expect(try await Self.backend(db) == backend)
        }
    }

    @Test func aStatementRefusedWhilePreparingClosesItsConnection() async throws {
        try await ClosedConnectionTests.withPoolOfOne { db in
            let backend = try await Self.backend(db)
            // No table yet: PostgreSQL refuses to prepare the statement (undefined table).
            let refused = await Self.failure(db) { connection in
                _ = try await connection.run(InsertKey.self, 1, logger: TestEnvironment.logger)
            }
            #expect(refused == "42P01")
            #expect(try await Self.backend(db) != backend)
            // With the table, the statement is prepared anew: the refusal did not stay.
            let stored = await Self.failure(db) { connection in
                try await connection.query(Self.makeTable, logger: TestEnvironment.logger)
                _ = try await connection.run(InsertKey.self, 1, logger: TestEnvironment.logger)
            }
            #expect(stored == nil)
        }
    }

    /// A statement that ends the session (a FATAL error: here the backend terminates itself, as
    /// a PostgreSQL shutdown does) ends the transaction without a `ROLLBACK`: PostgreSQL rolled
    /// it back with the session, and a `ROLLBACK` racing the channel's close could wait forever
    /// (``PostgresConnection/transaction(logger:_:)``). The error is the statement's own, no
    /// `ROLLBACK` error beside it, every time; then the pool serves the next lease.
    @Test func aStatementThatEndsTheSessionEndsTheTransactionWithoutARollback() async throws {
        try await ClosedConnectionTests.withPoolOfOne { db in
            for _ in 0..<5 {
                let backend = try await Self.backend(db)
                let failure = try await withDeadline(.seconds(30)) { () -> TransactionError? in
                    do {
                        try await db.client.withTransactionClosingRefused(logger: TestEnvironment.logger) { connection in
                            // Its rows read, so the FATAL error comes here, not with the next statement.
                            for try await _ in try await connection.query(
                                "SELECT pg_terminate_backend(pg_backend_pid())", logger: TestEnvironment.logger)
                            {}
                        }
                        return nil
                    } catch let error as TransactionError {
                        return error
                    }
                }
                let ended = try #require(failure?.closureError as? PSQLError, "\(String(describing: failure))")
                #expect(ended.serverInfo?[.sqlState] == "57P01")
                #expect(endedSession(ended))
                #expect(failure?.rollbackError == nil)
                #expect(try await Self.backend(db) != backend)
            }
        }
    }
}
