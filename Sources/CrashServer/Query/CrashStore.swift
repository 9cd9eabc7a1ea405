import Foundation
import PostgresNIO

/// What the query, triage and read-authentication paths need from storage.
///
/// Two implementations: ``CrashDatabase`` (PostgreSQL, the server's) and
/// ``InMemoryCrashStore`` (fast route tests only, never instead of the PostgreSQL tests).
/// Reads go through ``read(_:)``: one consistent snapshot per request, so counts from
/// several tables agree.
protocol CrashStore: Sendable {
    associatedtype Reader: CrashStoreReader

    /// The project a read token belongs to, or nil.
    func project(readToken: String) async throws -> ProjectRef?
    /// Runs `body` over one read snapshot.
    func read<T: Sendable>(_ body: (Reader) async throws -> T) async throws -> T
    /// Keeps a list's first-page snapshot for its cursors; returns its id.
    func saveListSnapshot(_ snapshot: String) async throws -> Int64
    /// Sets a group's status; false when the project has no such group.
    func triage(project: Int64, group: Int64, status: GroupStatus, resolvedIn: String?) async throws -> Bool
}

/// The reads of one snapshot (see ``CrashStore/read(_:)``); the documentation of each is on
/// its PostgreSQL implementation in `CrashDatabase+query.swift` / `+trend.swift`.
protocol CrashStoreReader: Sendable {
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
    func groupRows(project: Int64, ids: [Int64]) async throws -> [Int64: GroupRow]
    func versions(ids: [Int64]) async throws -> [Int64: [String]]
    func deviceCounts(project: Int64, counts: [Int64: Int64], window: TimeWindow, filters: GroupFilters) async throws -> [Int64: Int64]
    func groupHistogram(group: Int64, window: TimeWindow) async throws -> [Date: Int64]
    func breakdown(group: Int64, window: TimeWindow) async throws -> Breakdown
    func reports(
        project: Int64, group: Int64, after: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool
    ) async throws
        -> [(report: StoredReport, micros: Int64)]
    /// `maxSeries`: the caller keeps at most this many series; the store may leave out keys
    /// past the `maxSeries + 1` of highest total (ties by key in byte order).
    func stats(
        project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int
    ) async throws
        -> [(t: Date, key: String?, n: Int64)]
    func fatalStats(project: Int64, window: TimeWindow, unit: StatsInterval) async throws -> [(t: Date, key: String?, n: Int64)]
    func groupTrends(
        project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters: GroupFilters
    ) async throws
        -> [Int64: [Date: Int64]]
}

extension CrashDatabase: CrashStore {
    /// One read-only REPEATABLE READ transaction (``withReadSnapshot(_:)``).
    func read<T: Sendable>(_ body: (PostgresReader) async throws -> T) async throws -> T {
        try await withReadSnapshot { connection in try await body(PostgresReader(database: self, connection: connection)) }
    }
}

/// ``CrashStoreReader`` over one connection inside ``CrashDatabase/withReadSnapshot(_:)``;
/// the SQL stays in the `CrashDatabase+*.swift` files.
struct PostgresReader: CrashStoreReader {
    let database: CrashDatabase
    let connection: PostgresConnection

    func firstPageSnapshot() async throws -> (snapshot: String, asOf: String?) { try await database.firstPageSnapshot(on: connection) }
    func listSnapshot(_ id: Int64) async throws -> String? { try await database.listSnapshot(id, on: connection) }
    func windowCounts(
        project: Int64, ids: [Int64]?, window: TimeWindow, filters: GroupFilters, snapshot: String?
    ) async throws
        -> [Int64: Int64]
    {
        try await database.windowCounts(project: project, ids: ids, window: window, filters: filters, snapshot: snapshot, on: connection)
    }
    func countCandidates(
        project: Int64, window: TimeWindow, filters: GroupFilters, after: (bound: Int64, id: Int64)?, atLeast: Int64?,
        limit: Int
    )
        async throws -> [(id: Int64, bound: Int64)]
    {
        try await database.countCandidates(
            project: project, window: window, filters: filters, after: after, atLeast: atLeast, limit: limit, on: connection)
    }
    func timeCandidates(
        project: Int64, sort: GroupSort, window: TimeWindow, filters: GroupFilters, after: (Int64, Int64)?, limit: Int
    )
        async throws -> [(id: Int64, key: Int64)]
    {
        try await database.timeCandidates(
            project: project, sort: sort, window: window, filters: filters, after: after, limit: limit, on: connection)
    }
    func timeKeysAsOf(project: Int64, sort: GroupSort, snapshot: String) async throws -> [Int64: Int64?] {
        try await database.timeKeysAsOf(project: project, sort: sort, snapshot: snapshot, on: connection)
    }
    func groupRows(project: Int64, ids: [Int64]) async throws -> [Int64: GroupRow] {
        try await database.groupRows(project: project, ids: ids, on: connection)
    }
    func versions(ids: [Int64]) async throws -> [Int64: [String]] { try await database.versions(ids: ids, on: connection) }
    func deviceCounts(project: Int64, counts: [Int64: Int64], window: TimeWindow, filters: GroupFilters) async throws -> [Int64: Int64] {
        try await database.deviceCounts(project: project, counts: counts, window: window, filters: filters, on: connection)
    }
    func groupHistogram(group: Int64, window: TimeWindow) async throws -> [Date: Int64] {
        try await database.groupHistogram(group: group, window: window, on: connection)
    }
    func breakdown(group: Int64, window: TimeWindow) async throws -> Breakdown {
        try await database.breakdown(group: group, window: window, on: connection)
    }
    func reports(
        project: Int64, group: Int64, after: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool
    ) async throws
        -> [(report: StoredReport, micros: Int64)]
    {
        try await database.reports(project: project, group: group, after: after, limit: limit, includeStack: includeStack, on: connection)
    }
    func stats(
        project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int
    ) async throws
        -> [(t: Date, key: String?, n: Int64)]
    {
        try await database.stats(project: project, window: window, unit: unit, groupBy: groupBy, maxSeries: maxSeries, on: connection)
    }
    func fatalStats(project: Int64, window: TimeWindow, unit: StatsInterval) async throws -> [(t: Date, key: String?, n: Int64)] {
        try await database.fatalStats(project: project, window: window, unit: unit, on: connection)
    }
    func groupTrends(
        project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters: GroupFilters
    ) async throws
        -> [Int64: [Date: Int64]]
    {
        try await database.groupTrends(project: project, ids: ids, window: window, unit: unit, filters: filters, on: connection)
    }
}
