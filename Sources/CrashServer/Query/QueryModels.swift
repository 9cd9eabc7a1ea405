import CrashWire
import Foundation

/// A crash group as the list, the detail and `PATCH` answer it.
struct GroupBody: Codable, Sendable, Equatable {
    var id: String
    var signature: String
    var kind: String
    /// The grouping version the group was made with (`v1`, `v2`); it never changes.
    var groupingVersion: String
    var title: String
    /// Reports in the window (and filters).
    var count: Int64
    /// Distinct device ids in the window (and filters).
    var devices: Int64
    /// Over all time.
    var firstSeen: Date
    var lastSeen: Date
    var status: GroupStatus
    /// Always present, null unless resolved, so clients see one shape.
    @NullWhenAbsent var resolvedIn: String?
    var fatal: Bool
    /// App versions seen, highest first (numeric dotted order).
    var versions: [String]
    /// Who owns the group, an e-mail address; null when unassigned (triage.md).
    @NullWhenAbsent var assignee: String? = nil
    /// The snooze of an ignored group with a condition; null otherwise.
    @NullWhenAbsent var snoozed: SnoozeBody? = nil
    /// The group this one is merged into; null when not merged.
    @NullWhenAbsent var mergedInto: String? = nil
    /// The groups merged into this one, ascending.
    var merged: [String] = []
    /// Reports per hour or day over the window, zero-filled (list with `trend=hour|day`).
    var trend: [TimeCount]? = nil
}

struct GroupListBody: Codable, Sendable {
    var groups: [GroupBody]
    @NullWhenAbsent var nextCursor: String?
    /// `true` when the page's trends would have held more than the point budget
    /// (``PointBudget``) and only the rows of highest count kept theirs; absent otherwise.
    var truncated: Bool? = nil
}

struct ValueCount: Codable, Sendable, Equatable {
    var value: String
    var count: Int64
}

struct TimeCount: Codable, Sendable, Equatable {
    var t: Date
    var count: Int64
}

struct Breakdown: Codable, Sendable, Equatable {
    var versions: [ValueCount]
    var os: [ValueCount]
    var models: [ValueCount]
    var environments: [ValueCount] = []
}

/// A stored report, as it was sent, plus when the server received it.
struct StoredReport: Codable, Sendable, Equatable {
    var id: String
    var timestamp: Date
    var kind: String
    var reason: String
    var stack: [String]?
    var fatal: Bool?
    var app: AppInfo
    var device: DeviceInfo?
    var fingerprint: [String]?
    var context: [String: String]?
    var receivedAt: Date
    /// Always present: `production` for a report that named none.
    var environment = ReportLimits.defaultEnvironment
    /// Whether a scrubbing rule changed any of its fields before it was stored (data-protection.md).
    var scrubbed = false
    /// Frames of `stack` resolved with uploaded debug files (docs/symbolication.md); absent
    /// when none could be. Computed at read time, never stored.
    var symbolicated: [SymbolicatedFrame]? = nil
}

struct GroupDetailBody: Codable, Sendable {
    var group: GroupBody
    var breakdown: Breakdown
    var histogram: [TimeCount]
    var latest: [StoredReport]

    private enum CodingKeys: String, CodingKey { case breakdown, histogram, latest }

    init(group: GroupBody, breakdown: Breakdown, histogram: [TimeCount], latest: [StoredReport]) {
        self.group = group
        self.breakdown = breakdown
        self.histogram = histogram
        self.latest = latest
    }

    init(from decoder: any Decoder) throws {
        group = try GroupBody(from: decoder)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        breakdown = try c.decode(Breakdown.self, forKey: .breakdown)
        histogram = try c.decode([TimeCount].self, forKey: .histogram)
        latest = try c.decode([StoredReport].self, forKey: .latest)
    }

    /// The group's fields, flat, plus `breakdown`, `histogram` and `latest`.
    func encode(to encoder: any Encoder) throws {
        try group.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(breakdown, forKey: .breakdown)
        try c.encode(histogram, forKey: .histogram)
        try c.encode(latest, forKey: .latest)
    }
}

struct ReportListBody: Codable, Sendable {
    var reports: [StoredReport]
    @NullWhenAbsent var nextCursor: String?
}

struct StatsBody: Codable, Sendable {
    struct Series: Codable, Sendable, Equatable {
        @NullWhenAbsent var key: String?
        var points: [TimeCount]
    }
    var series: [Series]
    /// `true` when the series would have held more than the point budget (``PointBudget``)
    /// and only those of highest total count that fit are listed; absent otherwise.
    var truncated: Bool? = nil
}
