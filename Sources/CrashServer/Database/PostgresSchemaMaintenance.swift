import CrashWire
import Crypto
import Foundation
import Logging
import PostgresNIO

/// ``SchemaMaintenance`` on PostgreSQL: the primary's pool (``CrashDatabase/client``), whose
/// sessions keep PostgreSQL's default timeouts, so building an index is not cut short.
public struct PostgresSchemaMaintenance: SchemaMaintenance {
    let client: PostgresClient
    let logger: Logger

    public init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    /// Applies schema.sql in one transaction under an advisory lock, so replicas that
    /// start together migrate once. Every statement is idempotent; a database that already
    /// has this exact schema (by SHA-256 of its text) is left alone, so starting a server
    /// takes no DDL locks that would stall ingest on other replicas.
    ///
    /// On a database whose schema is recorded it needs no privilege beyond reading
    /// `schema_versions`, so a server that connects as a role without DDL rights (the compose
    /// stack's, Deploy/README.md) starts; on one that needs the schema applied, such a role
    /// gets a ``SchemaPrivilegeError`` naming `crash-server migrate`.
    ///
    /// A connection PostgreSQL closes between two of its statements (a restart) ends it with a
    /// connection error (``endingOnConnectionClose(whenCancelled:grace:_:)``), which start-up
    /// retries (`prepareDatabase`).
    public func migrate() async throws {
        try await migrate(statements: Schema.statements, reapplyingRecordedSchema: false)
    }

    /// `reapplyingRecordedSchema` runs every statement even when the schema's digest is
    /// already recorded: tests use it to prove each statement is idempotent on a database
    /// that already has it (the digest check alone would make a second `migrate()` a no-op).
    /// `afterStatement` runs after each of `statements`: tests end the connection there.
    func migrate(
        statements: [String], reapplyingRecordedSchema: Bool,
        afterStatement: @escaping @Sendable (PostgresConnection) async throws -> Void = { _ in }
    ) async throws {
        let digest = SHA256.hash(data: Array(Schema.sql.utf8)).map { String(format: "%02x", $0) }.joined()
        try await client.withTransactionEndingOnClose(logger: logger) { connection in
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
                try await afterStatement(connection)
            }
            try await connection.query(
                "INSERT INTO schema_versions (sha256) VALUES (\(digest)) ON CONFLICT (sha256) DO NOTHING", logger: logger)
            logger.info("schema applied", metadata: ["schema.sha256": "\(digest)", "schema.statements": "\(Schema.statements.count)"])
        }
    }

    /// The advisory lock that serializes partition maintenance across replicas.
    static let partitionLockID: Int64 = 0x6372_6173_6870_6172  // "crashpar"

    /// Creates the daily partitions covering the UTC days of `from`...`to` and drops those
    /// (and their idempotency rows) older than `dropBefore`'s UTC day, in one transaction
    /// under an advisory lock: replicas that run it at the same time take turns, and the
    /// second finds nothing left to do.
    func maintainPartitions(from: Date, to: Date, dropBefore: Date) async throws -> (created: Int, dropped: Int) {
        try await client.withTransactionEndingOnClose(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.partitionLockID))", logger: logger)
            var created = 0
            var dropped = 0
            let made = try await connection.query(
                "SELECT crashguard_ensure_partitions(\(Self.utcDay(from))::date, \(Self.utcDay(to))::date)", logger: logger)
            for try await count in made.decode(Int.self) { created = count }
            let gone = try await connection.query(
                "SELECT crashguard_drop_partitions_before(\(Self.utcDay(dropBefore))::date)", logger: logger)
            for try await count in gone.decode(Int.self) { dropped = count }
            return (created, dropped)
        }
    }

    /// `YYYY-MM-DD` of the UTC day holding `date`.
    static func utcDay(_ date: Date) -> String {
        String(RFC3339.format(date).prefix(10))
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
