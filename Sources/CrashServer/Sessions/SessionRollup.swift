import Foundation

/// A rollup row's key: project, release (app, version, environment) and the start of its hour
/// (`session_deltas`, `session_hours`) or UTC day (`session_days`).
struct SessionRollupKey: Hashable, Comparable, Sendable {
    var project: Int64
    var release: SessionRelease
    var time: Date

    /// The order rows are locked in, so two folds never wait for each other crosswise.
    static func < (a: Self, b: Self) -> Bool {
        (a.project, a.time, a.release.appID, a.release.version, a.release.environment)
            < (b.project, b.time, b.release.appID, b.release.version, b.release.environment)
    }
}

/// What a rollup row holds (or a delta adds to one): the counts of the sessions started in it,
/// their earliest and latest `started`, and their users.
struct SessionRollup: Sendable, Equatable {
    var started: Int64 = 0
    var crashed: Int64 = 0
    var errored: Int64 = 0
    var abnormal: Int64 = 0
    var firstSeen: Date?
    var lastSeen: Date?
    var users = SessionUsers()
    var crashedUsers = SessionUsers()

    /// Counts `started` into the first and last seen.
    mutating func seen(_ started: Date) {
        firstSeen = min(firstSeen ?? started, started)
        lastSeen = max(lastSeen ?? started, started)
    }

    /// Adds another row's counts and unites the users.
    mutating func merge(_ other: SessionRollup) {
        started += other.started
        crashed += other.crashed
        errored += other.errored
        abnormal += other.abnormal
        if let first = other.firstSeen { seen(first) }
        if let last = other.lastSeen { seen(last) }
        users.merge(other.users)
        crashedUsers.merge(other.crashedUsers)
    }
}
