import Crypto
import Foundation
import Logging
import PostgresNIO

extension CrashDatabase {
    /// Applies schema.sql in one transaction under an advisory lock, so replicas that
    /// start together migrate once. Every statement is idempotent; a database that already
    /// has this exact schema (by SHA-256 of its text) is left alone, so starting a server
    /// takes no DDL locks that would stall ingest on other replicas.
    public func migrate() async throws {
        let digest = SHA256.hash(data: Array(Schema.sql.utf8)).map { String(format: "%02x", $0) }.joined()
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Schema.migrationLockID))", logger: logger)
            try await connection.query("SET LOCAL client_min_messages = warning", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS schema_versions (sha256 text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                logger: logger)
            let applied = try await connection.query("SELECT 1 FROM schema_versions WHERE sha256 = \(digest)", logger: logger)
            for try await _ in applied.decode(Int.self) { return }
            for statement in Schema.statements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            try await connection.query("INSERT INTO schema_versions (sha256) VALUES (\(digest))", logger: logger)
            logger.info("schema applied", metadata: ["schema.sha256": "\(digest)", "schema.statements": "\(Schema.statements.count)"])
        }
    }
}
