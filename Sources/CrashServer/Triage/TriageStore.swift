import Foundation

/// What triage (``TriageService``) needs from storage: changes to groups with their activity
/// entries, the timeline and comments, and the snoozes whose time has come.
protocol TriageStore: Sendable {
    /// Applies `change` to the project's groups among `groups`, in one transaction, writing an
    /// activity entry for each status or assignee that changes (none for what is already so).
    /// - Returns: the ids of the project's groups among `groups` (changed or not).
    func apply(_ change: GroupChange, to groups: [Int64], project: Int64, actor: Principal) async throws -> Set<Int64>
    /// A page of a group's activity, newest first, after the entry `before` (nil: from the
    /// newest); nil when the project has no such group.
    func activity(project: Int64, group: Int64, before: Int64?, limit: Int) async throws -> ActivityPage?
    /// Adds a comment; nil when the project has no such group.
    func comment(project: Int64, group: Int64, text: String, actor: Principal) async throws -> ActivityEntry?
    /// Reopens the snoozed groups whose `until` has come (at most `limit`); returns them.
    func wakeDueSnoozes(limit: Int) async throws -> [Int64]
    /// Merges `source` into `into` (or into the group `into` is merged into), with the groups
    /// merged into `source`, writing `merged` entries on each moved group and the target.
    func merge(project: Int64, source: Int64, into: Int64, actor: Principal) async throws -> MergeOutcome
    /// Undoes the merge of `source` into `target`, writing `unmerged` entries on both.
    func unmerge(project: Int64, target: Int64, source: Int64, actor: Principal) async throws -> UnmergeOutcome
}

/// What a merge did, or why it did nothing.
enum MergeOutcome: Sendable, Equatable {
    /// Merged; the group the source is now merged into.
    case merged(target: Int64)
    /// The project has no such source group.
    case unknownSource
    /// The project has no such target group.
    case unknownTarget
    /// The source is itself merged into this group.
    case sourceMerged(into: Int64)
    /// The target is the source or is merged into it.
    case cycle
}

/// What an unmerge did, or why it did nothing.
enum UnmergeOutcome: Sendable, Equatable {
    case unmerged
    /// The project has no such target group.
    case unknownTarget
    /// The source is not merged into the target (or is no group of the project).
    case notMerged
}

/// One page of a group's activity.
struct ActivityPage: Sendable {
    var entries: [ActivityEntry]
    /// The group's first report: the `created` entry, the oldest of the timeline.
    var created: Date
}
