/// The bucket of a time series: `interval` of stats, `trend` of the list.
enum StatsInterval: String, Sendable, CaseIterable {
    case hour, day

    /// The bucket's length in seconds.
    var seconds: Double { self == .hour ? TimeWindow.hour : TimeWindow.day }
}
