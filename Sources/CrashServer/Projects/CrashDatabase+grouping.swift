import CrashGrouping
import CrashWire
import Foundation
import PostgresNIO

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

extension CrashDatabase {
    /// Switches the version a project's new reports are grouped with, on every server from
    /// the next request on (``changingProjects(_:)``). Existing groups keep theirs (their
    /// reports are never regrouped); returns the version before the switch.
    @discardableResult
    public func setGroupingVersion(slug: String, to version: GroupingVersion) async throws -> GroupingVersion {
        let previous: String? = try await changingProjects { (connection) -> (String?, transaction: String?) in
            let rows = try await connection.query(
                """
                UPDATE projects p SET grouping_version = \(version.rawValue)
                FROM (SELECT id, grouping_version FROM projects WHERE slug = \(slug) FOR UPDATE) old
                WHERE p.id = old.id RETURNING old.grouping_version, pg_current_xact_id()::text
                """, logger: logger)
            for try await (previous, transaction) in rows.decode((String, String).self) { return (previous, transaction) }
            return (nil, nil)
        }
        guard let previous else { throw ProjectError(description: "no project '\(slug)'") }
        logger.info(
            "project grouping version switched",
            metadata: ["project.slug": "\(slug)", "grouping.from": "\(previous)", "grouping.to": "\(version)"])
        return GroupingVersion(rawValue: previous) ?? .v1
    }

    /// The grouping version a project's new reports get.
    public func groupingVersion(slug: String) async throws -> GroupingVersion {
        let rows = try await client.query("SELECT grouping_version FROM projects WHERE slug = \(slug)", logger: logger)
        for try await version in rows.decode(String.self) { return GroupingVersion(rawValue: version) ?? .v1 }
        throw ProjectError(description: "no project '\(slug)'")
    }

    /// A dry run: groups the project's reports of the last `days` days (by client
    /// timestamp) with `target`, and compares with the groups they are in. Reads only.
    public func groupingPreview(
        slug: String, target: GroupingVersion, days: Int, now: Date = Date()
    ) async throws
        -> GroupingPreview
    {
        guard (1...3660).contains(days) else { throw ProjectError(description: "--days must be 1 to 3660") }
        let current = try await groupingVersion(slug: slug)
        let to = now
        let from = now.addingTimeInterval(-Double(days) * 86_400)
        let rows = try await client.query(
            """
            SELECT r.group_id, r.kind, r.reason, COALESCE(r.stack, r.stack_jsonb::text), COALESCE(r.fingerprint, r.fingerprint_jsonb::text)
            FROM reports r JOIN projects p ON p.id = r.project_id
            WHERE p.slug = \(slug) AND r.ts >= \(from) AND r.ts < \(to)
            """, logger: logger)
        let decoder = JSONDecoder()
        var comparison = RegroupComparison()
        for try await (group, kindText, reason, stackText, fingerprintText) in rows.decode(
            (Int64, String, String, String?, String?).self)
        {
            let stack = try stackText.map { try decoder.decode([String].self, from: Data($0.utf8)) }
            let fingerprint = try fingerprintText.map { try decoder.decode([String].self, from: Data($0.utf8)) }
            let kind = ReportKind(rawValue: kindText) ?? .custom
            let signature = Grouping.signature(
                kind: kind, reason: reason, stack: stack, fingerprint: fingerprint, version: target)
            comparison.add(group: group, signature: signature.hash, title: signature.title)
        }
        let result = comparison.result()
        var titles: [Int64: String] = [:]
        let ids = Set(result.splits.map(\.group))
        if !ids.isEmpty {
            let titleRows = try await client.query(
                "SELECT id, title FROM crash_groups WHERE id = ANY(\(Array(ids)))", logger: logger)
            for try await (id, title) in titleRows.decode((Int64, String).self) { titles[id] = title }
        }
        return GroupingPreview(
            project: slug, currentVersion: current.rawValue, targetVersion: target.rawValue, from: RFC3339.format(from),
            to: RFC3339.format(to), reports: comparison.reports, groupsNow: result.groupsNow,
            groupsAfter: result.groupsAfter, unchanged: result.unchanged, split: result.splits.count,
            merged: result.merges.count,
            splitExamples: result.splits.prefix(20).map {
                GroupingPreview.Split(group: $0.group, title: titles[$0.group] ?? "", reports: $0.reports, into: $0.into)
            },
            mergeExamples: result.merges.prefix(20).map {
                GroupingPreview.Merge(title: $0.title, reports: $0.reports, groups: $0.groups)
            })
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
