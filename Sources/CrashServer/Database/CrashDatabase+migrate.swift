import Crypto
import Foundation
import Logging
import PostgresNIO

extension CrashDatabase {
    /// Applies schema.sql in one transaction under an advisory lock, so replicas that
    /// start together migrate once. Every statement is idempotent; a database that already
    /// has this exact schema (by SHA-256 of its text) is left alone, so starting a server
    /// takes no DDL locks that would stall ingest on other replicas.
    ///
    /// On a database whose schema is recorded it needs no privilege beyond reading
    /// `schema_versions`, so a server that connects as a role without DDL rights (the compose
    /// stack's, Deploy/README.md) starts; on one that needs the schema applied, such a role
    /// gets a ``SchemaPrivilegeError`` naming `crash-server migrate`.
    public func migrate() async throws {
        try await migrate(statements: Schema.statements, reapplyingRecordedSchema: false)
    }

    /// `reapplyingRecordedSchema` runs every statement even when the schema's digest is
    /// already recorded: tests use it to prove each statement is idempotent on a database
    /// that already has it (the digest check alone would make a second `migrate()` a no-op).
    func migrate(statements: [String], reapplyingRecordedSchema: Bool) async throws {
        let digest = SHA256.hash(data: Array(Schema.sql.utf8)).map { String(format: "%02x", $0) }.joined()
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Schema.migrationLockID))", logger: logger)
            try await connection.query("SET LOCAL client_min_messages = warning", logger: logger)
            // Looked up first: CREATE TABLE IF NOT EXISTS needs the right to create even when the
            // table exists.
            var exists = false
            for try await found in try await connection.query("SELECT to_regclass('schema_versions') IS NOT NULL", logger: logger)
                .decode(Bool.self)
            {
                exists = found
            }
            if !exists {
                try await SchemaPrivilegeError.mapping {
                    try await connection.query(
                        "CREATE TABLE IF NOT EXISTS schema_versions (sha256 text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                        logger: logger)
                }
            }
            let applied = try await connection.query("SELECT 1 FROM schema_versions WHERE sha256 = \(digest)", logger: logger)
            var recorded = false
            for try await _ in applied.decode(Int.self) { recorded = true }
            if recorded && !reapplyingRecordedSchema { return }
            for statement in statements {
                try await SchemaPrivilegeError.mapping {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            }
            try await connection.query(
                "INSERT INTO schema_versions (sha256) VALUES (\(digest)) ON CONFLICT (sha256) DO NOTHING", logger: logger)
            logger.info("schema applied", metadata: ["schema.sha256": "\(digest)", "schema.statements": "\(Schema.statements.count)"])
        }
    }
}

/// The schema needs applying and the connected role may not change it: a server role without
/// DDL rights (Deploy/README.md, "Database roles") waits for `crash-server migrate` run as the
/// role that owns the tables.
public struct SchemaPrivilegeError: Error, CustomStringConvertible {
    /// What the database refused.
    let detail: String

    public var description: String {
        "the database schema is not applied and this role may not apply it (\(detail)): run `crash-server migrate` "
            + "as the role that owns the tables (in compose: the migrate service), then start the server again"
    }
}

extension SchemaPrivilegeError {
    /// Runs `statement`; PostgreSQL's refusal for lack of privilege (SQLSTATE 42501) becomes
    /// a ``SchemaPrivilegeError``.
    fileprivate static func mapping(_ statement: () async throws -> PostgresRowSequence) async throws {
        do {
            _ = try await statement()
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == PostgresError.Code.insufficientPrivilege.raw {
            throw SchemaPrivilegeError(detail: error.serverInfo?[.message] ?? "permission denied")
        }
    }
}
