import Logging
import PostgresNIO

extension CrashDatabase {
    /// Runs `body` in one read-only REPEATABLE READ transaction: every statement sees the
    /// same snapshot, so counts from several rollups and `pg_current_snapshot()` agree.
    /// On the standby when one is configured and usable, else on the primary's query pool
    /// (`withReader`).
    ///
    /// Both pools' sessions carry the statement timeout (``QueryTimeouts``): a statement that
    /// hits it is rolled back and answered 503 with `Retry-After` (``APIError/queryTimedOut``),
    /// never 500.
    func withReadSnapshot<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await endingOnConnectionClose(whenCancelled: .returnAtOnce) { [self] leased in
                try await withReader { client in
                    try await client.withConnection { connection in
                        leased(connection)
                        try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
                        do {
                            let result = try await body(connection)
                            try await connection.query("COMMIT", logger: logger)
                            return result
                        } catch {
                            _ = try? await connection.query("ROLLBACK", logger: logger)
                            throw error
                        }
                    }
                }
            }
        } catch  where sqlState(error) == "57014" {
            logger.warning("read query timed out", metadata: ["error.message": "\(error)"])
            throw APIError.queryTimedOut
        }
    }
}
