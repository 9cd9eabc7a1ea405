/// What the rollup aggregator (``RollupAggregator``) and the readers that wait for it
/// (``RollupFreshness``) need from storage. ``PostgresRollupStore`` is the server's.
protocol RollupStore: Sendable {
    /// One cycle: folds the oldest pending facts into the rollups, unless another server holds
    /// the aggregator's lock.
    func aggregate() async throws -> RollupCycle
    /// The newest pending row of `project` (nil: of any project), if any.
    func lastPending(project: Int64?) async throws -> Int64?
    /// Whether a row of `project` (nil: of any project) up to `seq` is still pending.
    func isPending(project: Int64?, upTo seq: Int64) async throws -> Bool
    /// What is pending: the aggregator's metrics.
    func tail() async throws -> RollupTail
}

/// What one aggregator cycle did.
enum RollupCycle: Sendable, Equatable {
    /// Another server holds the aggregator's lock: nothing was done here.
    case standby
    /// Took (deleted) `rows` pending rows and added their `reports` to the rollups; `full`: it
    /// took as many as a cycle takes, so more may be waiting.
    case folded(rows: Int, reports: Int, full: Bool)
}

/// The pending rows: their count, their reports, and the age of the oldest in seconds.
struct RollupTail: Sendable, Equatable {
    var rows: Int
    var reports: Int
    var ageSeconds: Double
}
