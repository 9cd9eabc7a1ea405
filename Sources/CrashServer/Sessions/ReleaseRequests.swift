import Foundation

/// One page of the releases list (`GET .../releases`, the dashboard's Releases page).
struct ReleaseListRequest: Sendable, Equatable {
    /// The window counted; a cursor's own window replaces it (``ReleaseCursor/window``).
    var window: TimeWindow
    var filters = SessionFilters()
    /// Rows per page, 1 to 200.
    var limit = 50
    /// Where the previous page ended; nil for the first page.
    var cursor: ReleaseCursor? = nil
}

/// One release's detail (`GET .../releases/{version}`, the dashboard's release page): its
/// counts, a series in buckets of `interval`, its top crash groups and those it introduced.
struct ReleaseDetailRequest: Sendable, Equatable {
    /// The version, 1 to 200 bytes, percent-decoded.
    var version: String
    var window: TimeWindow
    var filters = SessionFilters()
    var interval = StatsInterval.hour
}
