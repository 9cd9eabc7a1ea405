import Foundation

/// One page of the crash list (`GET .../crashes`, the dashboard's lists, `crash-server top`).
struct GroupListRequest: Sendable, Equatable {
    /// The window counted; a cursor's own window replaces it (``ListCursor/window``).
    var window: TimeWindow
    var filters = GroupFilters()
    var sort = GroupSort.count
    /// Rows per page, 1 to 200.
    var limit = 50
    /// Where the previous page ended; nil for the first page.
    var cursor: ListCursor? = nil
    /// A zero-filled series per row in buckets of this interval (`trend=hour|day`); nil for none.
    var trend: StatsInterval? = nil
}

/// One group's detail: counts, breakdowns and histogram over `window`, plus its latest reports.
struct GroupDetailRequest: Sendable, Equatable {
    var group: Int64
    var window: TimeWindow
    /// `environment=`: count only the reports in these environments; empty for all.
    var environments: [String] = []
}

/// A page of one group's stored reports, newest first, with their stacks.
struct ReportListRequest: Sendable, Equatable {
    var group: Int64
    /// Reports per page, 1 to 200.
    var limit = 50
    /// Where the previous page ended (a cursor of ``ListCursor/Order/reports`` for `group`).
    var cursor: ListCursor? = nil
    /// `environment=`: only the reports in these environments; empty for all.
    var environments: [String] = []
}

/// Project-wide counts per bucket (`GET .../stats`, the dashboard's overview).
struct StatsRequest: Sendable, Equatable {
    var window: TimeWindow
    var interval = StatsInterval.hour
    var groupBy = StatsGrouping.none
    /// `environment=`: count only the reports in these environments; empty for all.
    var environments: [String] = []
}
