import Logging
import PostgresNIO

extension CrashDatabase {
    /// Applies schema.sql in one transaction under an advisory lock, so replicas that
    /// start together migrate once. Every statement is idempotent.
    public func migrate() async throws {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Schema.migrationLockID))", logger: logger)
            try await connection.query("SET LOCAL client_min_messages = warning", logger: logger)
            for statement in Schema.statements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        }
        logger.debug("schema applied", metadata: ["schema.statements": "\(Schema.statements.count)"])
    }
}
