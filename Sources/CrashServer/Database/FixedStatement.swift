import Logging
import PostgresNIO
import Synchronization

/// A statement whose text is the same on every call (only its binds differ), run as a named
/// prepared statement (``PostgresConnection/run(_:_:logger:)``): PostgreSQL parses it once per
/// connection and, under `plan_cache_mode = force_generic_plan` (which the ingest
/// pool sets for its sessions, ``IngestTimeouts/startupParameters``), plans it once, instead of
/// both at every commit. Built with `PostgresQuery` interpolation like every other statement.
protocol FixedStatement {
    associatedtype Input
    /// The statement for `input`.
    static func query(_ input: Input) -> PostgresQuery
    /// Its text, the same for every input: `query(anyInput).sql`.
    static var sql: String { get }
}

/// The prepared form of a ``FixedStatement``; its name is its type's (`Prepared<ClaimAndCount>`).
struct Prepared<Statement: FixedStatement>: PostgresPreparedStatement {
    typealias Row = PostgresRow
    static var sql: String { Statement.sql }
    /// PostgresNIO's default name, made once per statement: it asks for the name at every
    /// execution, and `String(reflecting:)` (dynamic casts, metadata lookups) was 0.3 % of the
    /// server's CPU per single-report request (docs/performance.md).
    static var name: String { typeNames.name(of: Self.self) }
    let binds: PostgresBindings
    func makeBindings() -> PostgresBindings { binds }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

extension PostgresConnection {
    /// Runs `statement` for `input` as a named prepared statement (see ``FixedStatement``).
    ///
    /// The bind types of the first call on a connection are the statement's; they are the same
    /// on every call since they come from the Swift types of the interpolated values.
    ///
    /// A statement that PostgreSQL refused to prepare stays refused on that connection
    /// (PostgresNIO keeps the error for its name), and preparing can fail for a passing reason: a
    /// `lock_timeout` while parse analysis waits for a lock on a table (partition maintenance
    /// queued behind a long read). So a statement the database refused is named to the
    /// transaction around it (``PostgresClient/withTransactionClosingRefused(logger:_:)``), which
    /// closes the connection once it is rolled back if PostgreSQL has not prepared that statement,
    /// and the pool opens a fresh one.
    func run<Statement: FixedStatement>(
        _ statement: Statement.Type, _ input: Statement.Input, logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> {
        let query = Statement.query(input)
        assert(query.sql == Statement.sql, "\(Statement.self): its text changed with its input")
        do {
            return try await execute(Prepared<Statement>(binds: query.binds), logger: logger)
        } catch let error as PSQLError where error.code == .server && !endedSession(error) {
            // (A FATAL error ends the session: nothing is left to ask about its statements.)
            RefusedStatements.current?.insert(Prepared<Statement>.name)
            throw error
        }
    }
}

extension PostgresClient {
    /// A transaction (``PostgresConnection/transaction(logger:_:)``), and a connection on which
    /// the database refused to prepare a ``FixedStatement`` of the transaction is closed after
    /// its `ROLLBACK`, before the pool gets it back: that refusal stays with its connection.
    ///
    /// Only those: an error while a prepared statement runs (a unique violation, a deadlock, a
    /// serialization failure, a lock timeout on a row) leaves the statement prepared and the
    /// connection as good as any, so it goes back to the pool. Which it was, PostgreSQL says
    /// (`pg_prepared_statements`), asked once the transaction is rolled back and only when a
    /// statement was refused; the error alone does not tell, as a lock timeout or a deadlock
    /// can come from preparing (parse analysis locks the tables) or from running.
    ///
    /// Closed at once instead, the close raced the `ROLLBACK`: written to the closed channel it
    /// was never answered, and the transaction ended as a lost connection (503 "database
    /// unreachable", the database marked down) instead of with its own error (503 "database
    /// busy" for a lock timeout while preparing).
    func withTransactionClosingRefused<T: Sendable>(
        logger: Logger, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            let refused = RefusedStatements()
            do {
                let result = try await RefusedStatements.$current.withValue(refused) {
                    try await connection.transaction(logger: logger) { try await body($0) }
                }
                await refused.closeUnlessPrepared(connection, logger: logger)
                return result
            } catch {
                await refused.closeUnlessPrepared(connection, logger: logger)
                throw error
            }
        }
    }
}

/// The ``FixedStatement``s the database refused within one transaction
/// (``PostgresClient/withTransactionClosingRefused(logger:_:)``), by prepared statement name.
final class RefusedStatements: Sendable {
    @TaskLocal static var current: RefusedStatements?

    private let names = Mutex<Set<String>>([])

    func insert(_ name: String) {
        _ = names.withLock { $0.insert(name) }
    }

    /// Closes `connection` unless PostgreSQL holds every refused statement as prepared
    /// (refused while running, not while preparing); nothing to ask when none was refused. An
    /// answer that does not come (the connection failed) closes it too.
    func closeUnlessPrepared(_ connection: PostgresConnection, logger: Logger) async {
        let refused = Array(names.withLock { $0 })
        guard !refused.isEmpty, !connection.isClosed else { return }
        var prepared = 0
        do {
            // PostgreSQL keeps a statement's name cut to the identifier length.
            let rows = try await connection.query(
                """
                SELECT count(*)::int FROM unnest(\(refused)::text[]) AS refused(name) WHERE EXISTS (
                    SELECT 1 FROM pg_prepared_statements p
                    WHERE p.name = left(refused.name, current_setting('max_identifier_length')::int))
                """, logger: logger)
            for try await count in rows.decode(Int.self) { prepared = count }
        } catch {}
        guard prepared < refused.count else { return }
        logger.debug(
            "closing a connection on which a statement was refused while preparing", metadata: ["db.statements": "\(refused)"])
        try? await connection.close()
    }
}

/// `String(reflecting:)` of each type asked for, made once.
private let typeNames = TypeNames()

private final class TypeNames: Sendable {
    private let names = Mutex<[ObjectIdentifier: String]>([:])

    func name(of type: Any.Type) -> String {
        names.withLock { names in
            if let name = names[ObjectIdentifier(type)] { return name }
            let name = String(reflecting: type)
            names[ObjectIdentifier(type)] = name
            return name
        }
    }
}

/// What a transaction of ``PostgresConnection/transaction(logger:_:)`` failed with: its `BEGIN`,
/// its body (and the `ROLLBACK` after it, when one was sent and failed), or its `COMMIT`.
struct TransactionError: Error {
    var beginError: (any Error)?
    var closureError: (any Error)?
    var rollbackError: (any Error)?
    var commitError: (any Error)?
}

extension PostgresConnection {
    /// `BEGIN`, `body`, `COMMIT`, as PostgresNIO's `withTransaction(logger:_:)`, but without a
    /// `ROLLBACK` after an error that ended the session (``endedSession(_:)``): PostgreSQL rolls
    /// the transaction back as the session ends, and PostgresNIO 1.33 never answers a statement
    /// written once its channel has closed (the write's promise is dropped). A `ROLLBACK` sent
    /// right after a FATAL error raced the channel's close and, when it lost, waited forever,
    /// holding its connection's lease and with it the pool's shutdown: a test lane hung so.
    func transaction<T: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            try await query("BEGIN", logger: logger)
        } catch {
            throw TransactionError(beginError: error)
        }
        let value: T
        do {
            value = try await body(self)
        } catch {
            var failure = TransactionError(closureError: error)
            if isClosed || endedSession(error) {
                // Closed on this side too before the pool gets it back, so that no lease is
                // given the dying connection (its channel closes a moment after the error).
                try? await close()
            } else {
                do { try await query("ROLLBACK", logger: logger) } catch { failure.rollbackError = error }
            }
            throw failure
        }
        do {
            try await query("COMMIT", logger: logger)
        } catch {
            throw TransactionError(commitError: error)
        }
        return value
    }
}

/// Whether `error` ended the database session: PostgreSQL sent a FATAL (or PANIC) error and
/// closes the connection, or the connection is closed already.
func endedSession(_ error: any Error) -> Bool {
    guard let psql = error as? PSQLError else { return false }
    switch psql.code {
    case .server:
        return ["FATAL", "PANIC"].contains(psql.serverInfo?[.severity] ?? "")
    case .serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown:
        return true
    default:
        return false
    }
}
