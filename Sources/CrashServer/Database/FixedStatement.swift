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
    /// queued behind a long read). So the transactions that run these statements close their
    /// connection after an error from the database, once it is rolled back
    /// (``PostgresClient/withTransactionClosingRefused(logger:_:)``), and the pool opens a fresh one.
    func run<Statement: FixedStatement>(
        _ statement: Statement.Type, _ input: Statement.Input, logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> {
        let query = Statement.query(input)
        assert(query.sql == Statement.sql, "\(Statement.self): its text changed with its input")
        return try await execute(Prepared<Statement>(binds: query.binds), logger: logger)
    }
}

extension PostgresClient {
    /// `withTransaction`, and a connection on which the database refused a statement of the
    /// transaction is closed after its `ROLLBACK`, before the pool gets it back: a prepared
    /// statement's refusal stays with its connection (``FixedStatement``).
    ///
    /// Closed at once instead, the close raced the `ROLLBACK`: written to the closed channel it
    /// was never answered, and the transaction ended as a lost connection (503 "database
    /// unreachable", the database marked down) instead of with its own error (503 "database
    /// busy" for a lock timeout while preparing).
    func withTransactionClosingRefused<T: Sendable>(
        logger: Logger, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            do {
                return try await connection.withTransaction(logger: logger) { try await body($0) }
            } catch let error as PostgresTransactionError where (error.closureError as? PSQLError)?.code == .server {
                try? await connection.close()
                throw error
            }
        }
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
