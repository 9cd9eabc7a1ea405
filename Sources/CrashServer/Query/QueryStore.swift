import Foundation

/// What the query service (``QueryService``) needs from storage: the crash list, a group's
/// detail and reports, the stats, and the read token of the query routes.
///
/// Two implementations: ``PostgresQueryStore`` (the server's) and `InMemoryCrashStore`
/// (fast route tests only, never instead of the PostgreSQL tests). Reads go through
/// ``read(_:)``: one consistent snapshot per request, so counts from several tables agree.
protocol QueryStore: ReadTokenLookup {
    associatedtype Reader: QueryReader

    /// Runs `body` over one read snapshot.
    func read<T: Sendable>(_ body: @escaping @Sendable (Reader) async throws -> T) async throws -> T
    /// Returns once the rollups hold every report of `project` committed before the call
    /// (read-your-writes; ``RollupFreshness``), or once the store's wait budget has passed.
    /// Stores whose rollups are written with the reports have nothing to wait for.
    func awaitRollups(project: Int64) async throws
    /// Keeps a list's first-page snapshot for its cursors; returns its id.
    func saveListSnapshot(_ snapshot: String) async throws -> Int64
}

/// The reads of one snapshot (see ``QueryStore/read(_:)``); each is documented on its
/// PostgreSQL implementation (``PostgresQueryStore/Reader``).
protocol QueryReader: Sendable {
    /// The first page's snapshot, and the one to read counts as of (nil: current data).
    func firstPageSnapshot() async throws -> (snapshot: String, asOf: String?)
    func listSnapshot(_ id: Int64) async throws -> String?
    func windowCounts(
        project: Int64, ids: [Int64]?, window: TimeWindow, filters: GroupFilters, snapshot: String?
    ) async throws
        -> [Int64: Int64]
    func countCandidates(
        project: Int64, window: TimeWindow, filters: GroupFilters, after: (bound: Int64, id: Int64)?, atLeast: Int64?,
        limit: Int
    )
        async throws -> [(id: Int64, bound: Int64)]
    func timeCandidates(
        project: Int64, sort: GroupSort, window: TimeWindow, filters: GroupFilters, after: (Int64, Int64)?, limit: Int
    )
        async throws -> [(id: Int64, key: Int64)]
    func timeKeysAsOf(project: Int64, sort: GroupSort, snapshot: String) async throws -> [Int64: Int64?]
    /// The oldest report time the project keeps at `now` (its retention's cut-off): reads
    /// clamp their windows to it (``TimeWindow/retained(since:)``).
    func retainedSince(project: Int64, now: Date) async throws -> Date
    /// Each group's oldest report at or after `since`, its merged groups' included; with
    /// `environments`, of its reports in those environments.
    func firstSeen(ids: [Int64], since: Date, environments: [String]) async throws -> [Int64: Date]
    func groupRows(project: Int64, ids: [Int64]) async throws -> [Int64: GroupRow]
    /// The versions of each group's reports at or after `since`, highest first.
    func versions(ids: [Int64], since: Date) async throws -> [Int64: [String]]
    /// Distinct devices per group in `window`, which starts at or after `since` (the retention's
    /// cut-off: no estimate reads a day that starts before it).
    func deviceCounts(
        project: Int64, counts: [Int64: Int64], window: TimeWindow, since: Date, filters: GroupFilters
    ) async throws
        -> [Int64: Int64]
    func groupHistogram(group: Int64, window: TimeWindow, environments: [String]) async throws -> [Date: Int64]
    func environmentTimes(ids: [Int64], environments: [String]) async throws -> [Int64: (first: Date, last: Date)]
    /// The environments the project has reports at or after `since` in (the retention's
    /// cut-off), by name (at most 100).
    func environments(project: Int64, since: Date) async throws -> [String]
    func breakdown(group: Int64, window: TimeWindow, environments: [String]) async throws -> Breakdown
    func reports(
        project: Int64, group: Int64, after: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool, environments: [String]
    ) async throws
        -> [(report: StoredReport, micros: Int64)]
    /// `maxSeries`: the caller keeps at most this many series; the store may leave out keys
    /// past the `maxSeries + 1` of highest total (ties by key in byte order).
    func stats(
        project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int, environments: [String]
    ) async throws
        -> [(t: Date, key: String?, n: Int64)]
    func fatalStats(
        project: Int64, window: TimeWindow, unit: StatsInterval, environments: [String]
    ) async throws -> [(t: Date, key: String?, n: Int64)]
    func groupTrends(
        project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters: GroupFilters
    ) async throws
        -> [Int64: [Date: Int64]]
}

extension QueryStore {
    func awaitRollups(project: Int64) async throws {}
}

extension QueryReader {
    /// The response bodies of `counts` groups (in that order), with devices and versions, as
    /// if no report before `since` (the retention's cut-off) existed: `window` is clamped to it,
    /// versions and first-seen times come from the reports kept.
    func groupBodies(
        project: Int64, counts: [(Int64, Int64)], window: TimeWindow, filters: GroupFilters, since: Date
    ) async throws -> [GroupBody] {
        guard !counts.isEmpty else { return [] }
        let ids = counts.map(\.0)
        let rows = try await groupRows(project: project, ids: ids)
        let versionLists = try await self.versions(ids: ids, since: since)
        let devices = try await deviceCounts(
            project: project, counts: Dictionary(counts, uniquingKeysWith: max), window: window.retained(since: since), since: since,
            filters: filters)
        // With `environment=`, first and last seen within those environments, where the group
        // has a report kept there; a first time past the cut-off is that of the oldest report kept.
        let times =
            filters.environments.isEmpty
            ? [:] : try await environmentTimes(ids: ids, environments: filters.environments).filter { $0.value.last >= since }
        let old = rows.values.filter { (times[$0.id]?.first ?? $0.firstSeen) < since }.map(\.id)
        let keptIn = try await firstSeen(ids: old.filter { times[$0] != nil }, since: since, environments: filters.environments)
        let kept = try await firstSeen(ids: old.filter { times[$0] == nil }, since: since, environments: []).merging(keptIn) { $1 }
        return counts.compactMap { id, count in
            guard let row = rows[id] else { return nil }
            return GroupBody(
                id: String(id), signature: row.signature, kind: row.kind, groupingVersion: row.groupingVersion,
                title: row.title, count: count,
                devices: devices[id] ?? 0, firstSeen: kept[id] ?? times[id]?.first ?? row.firstSeen,
                lastSeen: times[id]?.last ?? row.lastSeen,
                status: row.status,
                resolvedIn: row.resolvedIn, fatal: row.fatal, versions: versionLists[id] ?? [], assignee: row.assignee,
                snoozed: row.snoozed, mergedInto: row.mergedInto.map(String.init), merged: row.merged.map(String.init))
        }
    }

    /// One group's body with its count over `window` clamped to the project's retention
    /// (triage's answer, a webhook's group); nil when the group has no report kept.
    func groupBody(project: Int64, group: Int64, window: TimeWindow, now: Date = Date()) async throws -> GroupBody? {
        let since = try await retainedSince(project: project, now: now)
        let histogram = try await groupHistogram(group: group, window: window.retained(since: since), environments: [])
        let body = try await groupBodies(
            project: project, counts: [(group, histogram.values.reduce(0, +))], window: window, filters: GroupFilters(), since: since
        ).first
        return body.flatMap { $0.lastSeen < since ? nil : $0 }
    }
}

/// A crash group's stored row.
struct GroupRow: Sendable {
    var id: Int64
    var signature: String
    var kind: String
    var groupingVersion: String
    var title: String
    var firstSeen: Date
    var lastSeen: Date
    var status: GroupStatus
    var fatal: Bool
    var resolvedIn: String?
    var assignee: String? = nil
    var snoozed: SnoozeBody? = nil
    var mergedInto: Int64? = nil
    /// The groups merged into this one, ascending.
    var merged: [Int64] = []
}

/// A query store failed in a way no client caused (a row PostgreSQL should have returned
/// did not come back); answered 500 and logged, like any storage error.
struct QueryStoreError: Error, CustomStringConvertible, Sendable {
    private enum Code: Sendable { case noSnapshot, snapshotNotSaved }
    private let code: Code

    /// `pg_current_snapshot()` returned no row.
    static let noSnapshot = QueryStoreError(code: .noSnapshot)
    /// The `list_snapshots` insert returned no id.
    static let snapshotNotSaved = QueryStoreError(code: .snapshotNotSaved)

    var description: String {
        switch code {
        case .noSnapshot: "no snapshot"
        case .snapshotNotSaved: "list snapshot not saved"
        }
    }
}
