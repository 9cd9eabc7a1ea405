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
