import CrashWire
import Foundation

/// Where sessions are counted and release health is read (release-health.md): both ingest
/// doors write through ``applySessions(project:updates:aggregates:)``, the releases list and
/// detail (REST and dashboard) read through ``releasePage(project:window:filters:after:limit:)``
/// and ``releaseDetail(project:version:window:filters:interval:)``.
protocol SessionStore: Sendable {
    /// Applies `updates` in array order and adds `aggregates`, all in one transaction that has
    /// committed when this returns; one outcome per update.
    func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate]
    ) async throws
        -> [SessionOutcome]

    /// Folds up to `limit` rollup deltas into the hourly and daily rollups; how many it folded
    /// (0 when another server is folding).
    func compactSessions(limit: Int) async throws -> Int

    /// Deletes the state of sessions started before `cutoff`, which no update can change any
    /// more; the rollups keep their counts. How many rows were deleted.
    func pruneSessions(before cutoff: Date) async throws -> Int64

    /// The releases with sessions in `window`, most sessions first (``ReleaseTotals/before(_:_:)``),
    /// the `limit` after `after` with their users and first/last seen, in one snapshot.
    func releasePage(
        project: Int64, window: TimeWindow, filters: SessionFilters, after: ReleaseTotals?, limit: Int
    ) async throws -> ReleasePage

    /// One version's totals, first/last seen and series (by `interval`), and the sessions of all
    /// versions (the adoption's divisor), in one snapshot.
    func releaseDetail(
        project: Int64, version: String, window: TimeWindow, filters: SessionFilters, interval: StatsInterval
    ) async throws -> ReleaseDetail
}

/// A release's counts in a window and filters, users included.
struct ReleaseTotals: Sendable, Equatable {
    var version: String
    var sessions: Int64 = 0
    var crashed: Int64 = 0
    var errored: Int64 = 0
    var abnormal: Int64 = 0
    var users: Int64 = 0
    var crashedUsers: Int64 = 0

    /// The list's order: most sessions first; ties: highest version first (numeric dotted),
    /// then by text.
    static func before(_ a: ReleaseTotals, _ b: ReleaseTotals) -> Bool {
        if a.sessions != b.sessions { return a.sessions > b.sessions }
        let order = AppVersion.compare(a.version, b.version)
        if order != 0 { return order > 0 }
        return a.version > b.version
    }
}

/// The earliest and latest `started` of a version over all time.
struct ReleaseSeen: Sendable, Equatable {
    var first: Date
    var last: Date
}

/// One page of the releases list.
struct ReleasePage: Sendable {
    var releases: [ReleaseTotals]
    /// Sessions of all versions in the window and filters.
    var allSessions: Int64
    var seen: [String: ReleaseSeen]
    /// The last release of the page, when more follow.
    var next: ReleaseTotals?
}

/// One release over a window.
struct ReleaseDetail: Sendable {
    var totals: ReleaseTotals
    var allSessions: Int64
    var seen: ReleaseSeen?
    /// Zero-filled, one point per `interval` from `from` (floored) to `to`.
    var series: [ReleaseSeriesPoint]
}

/// The session filters of the release queries.
struct SessionFilters: Sendable, Hashable {
    var environment: String?
    var app: String?
}

/// A release's series point: sessions by `started`, and how they ended.
struct ReleaseSeriesPoint: Codable, Sendable, Equatable {
    var t: Date
    var sessions: Int64
    var crashed: Int64
    var errored: Int64
    var abnormal: Int64
}
