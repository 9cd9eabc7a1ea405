/// Where the group-commit writes a batch (``IngestBatcher``): ``PostgresIngestStore`` on the
/// server. The batcher takes the store as a function (`IngestBatcher.Store`), so its tests give
/// it stores that block, fail or hang on cue.
protocol IngestStore: Sendable {
    /// Stores `items` (unique by ``ReportKey``) in one transaction, sending `COMMIT` only if
    /// `gate` lets it (``CommitGate``).
    ///
    /// - Returns: the keys of the reports stored by this call; the others were stored before
    ///   (retries).
    /// - Throws: ``CommitOutcomeUnknown`` when `COMMIT` was sent and its answer never came;
    ///   any other error means nothing was stored.
    func store(_ items: [IngestItem], gate: CommitGate) async throws -> Set<ReportKey>
}

/// The ingest transaction found the database in a state it cannot explain.
struct IngestStoreError: Error, CustomStringConvertible {
    let description: String
}

/// The statements of ``PostgresIngestStore``'s transaction, run as prepared statements
/// (``FixedStatement``).
///
/// A namespace of their own, with a short name: a prepared statement is named after its type
/// (`CrashServer.Prepared<CrashServer.IngestSQL.ClaimAndCount>`), and PostgreSQL cuts names
/// at 63 bytes; nested in `PostgresIngestStore`, the names would be cut and could no longer
/// be told apart by their full text.
enum IngestSQL {}
