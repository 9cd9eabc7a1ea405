import Foundation

/// How a project's recent reports would regroup under another grouping version: the
/// answer of `crash-server project grouping NAME VERSION --preview`.
public struct GroupingPreview: Codable, Sendable {
    /// A group of today whose reports would land in several groups.
    public struct Split: Codable, Sendable {
        public var group: Int64
        public var title: String
        public var reports: Int
        /// How many groups its reports would make.
        public var into: Int
    }

    /// A group of the new version that would hold reports of several groups of today.
    public struct Merge: Codable, Sendable {
        public var title: String
        public var reports: Int
        /// The groups of today it would absorb.
        public var groups: [Int64]
    }

    public var project: String
    public var currentVersion: String
    public var targetVersion: String
    /// The window: reports whose client timestamp is in `[from, to)`.
    public var from: String
    public var to: String
    public var reports: Int
    /// Groups the window's reports are in today, and would be in under the target version.
    public var groupsNow: Int
    public var groupsAfter: Int
    /// Groups of today that would stay one group with the same reports.
    public var unchanged: Int
    /// Groups of today whose reports would be split over several groups.
    public var split: Int
    /// Groups of the target version holding reports of several groups of today.
    public var merged: Int
    /// The largest splits and merges (at most 20 each), by report count.
    public var splitExamples: [Split]
    public var mergeExamples: [Merge]

    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}

/// Compares two groupings of the same reports: the groups they are in (old) and the
/// signatures they would get (new). Pure, so it is tested without a database.
struct RegroupComparison {
    private(set) var reports = 0
    /// Old group -> new signature -> reports.
    private var oldToNew: [Int64: [String: Int]] = [:]
    /// New signature -> old group -> reports, and a title.
    private var newToOld: [String: [Int64: Int]] = [:]
    private var titles: [String: String] = [:]

    mutating func add(group: Int64, signature: String, title: String) {
        reports += 1
        oldToNew[group, default: [:]][signature, default: 0] += 1
        newToOld[signature, default: [:]][group, default: 0] += 1
        if titles[signature] == nil { titles[signature] = title }
    }

    struct Result {
        var groupsNow: Int
        var groupsAfter: Int
        var unchanged: Int
        var splits: [(group: Int64, reports: Int, into: Int)]
        var merges: [(title: String, reports: Int, groups: [Int64])]
    }

    func result() -> Result {
        var unchanged = 0
        var splits: [(group: Int64, reports: Int, into: Int)] = []
        for (group, targets) in oldToNew {
            if targets.count > 1 {
                splits.append((group, targets.values.reduce(0, +), targets.count))
            } else if let only = targets.keys.first, newToOld[only]?.count == 1 {
                unchanged += 1
            }
        }
        var merges: [(title: String, reports: Int, groups: [Int64])] = []
        for (signature, sources) in newToOld where sources.count > 1 {
            merges.append((titles[signature] ?? "", sources.values.reduce(0, +), sources.keys.sorted()))
        }
        splits.sort { ($0.reports, $1.group) > ($1.reports, $0.group) }
        merges.sort { ($0.reports, $1.groups.first ?? 0) > ($1.reports, $0.groups.first ?? 0) }
        return Result(
            groupsNow: oldToNew.count, groupsAfter: newToOld.count, unchanged: unchanged, splits: splits, merges: merges)
    }
}
