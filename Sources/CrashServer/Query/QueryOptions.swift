/// The crash list's `sort`.
enum GroupSort: String, Sendable, CaseIterable {
    case count, lastSeen, firstSeen
}

/// The stats' `groupBy`.
enum StatsGrouping: String, Sendable, CaseIterable {
    case none, kind, version, fatal, environment
}
