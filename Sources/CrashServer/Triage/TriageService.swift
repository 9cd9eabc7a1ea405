import Foundation

/// Triage of a project's groups (triage.md): status, snooze and assignee of one group or of
/// every group a list matches, merge and unmerge, the activity timeline and comments. The REST routes
/// (``TriageController``) and the dashboard share it, so both write the same entries.
struct TriageService<Store: TriageStore, Queries: QueryStore>: Sendable {
    let store: Store
    let queries: QueryService<Queries>

    /// Most groups one bulk change may touch.
    static var maxBulkGroups: Int { 1000 }
    /// Most bytes of a comment.
    static var maxCommentBytes: Int { 4096 }

    /// Applies `change` to one group and answers it as the list shows it (default window);
    /// 404 for a group the project does not have.
    func update(_ project: ProjectRef, group: Int64, _ change: GroupChange, actor: Principal) async throws -> GroupBody {
        guard try await store.apply(change, to: [group], project: project.id, actor: actor).contains(group) else {
            throw APIError.noCrashGroup(group, in: project)
        }
        return try await body(project, group: group)
    }

    /// Applies `change` to every group that `list` lists (all pages); returns how many matched.
    /// More than ``maxBulkGroups`` is a 400 naming `q`, and changes nothing.
    func bulkUpdate(_ project: ProjectRef, list: GroupListRequest, _ change: GroupChange, actor: Principal) async throws -> Int {
        let ids = try await queries.read(project) { reader in
            try await reader.windowCounts(project: project.id, ids: nil, window: list.window, filters: list.filters, snapshot: nil)
        }.keys
        guard ids.count <= Self.maxBulkGroups else {
            throw APIError.badRequest(
                "q: \(ids.count) groups match, more than \(Self.maxBulkGroups) at once; narrow the search or the filters")
        }
        return try await store.apply(change, to: Array(ids), project: project.id, actor: actor).count
    }

    /// A page of a group's activity, newest first, ending with its `created` entry; 404 for a
    /// group the project does not have, 400 for a cursor this list did not give.
    func activity(_ project: ProjectRef, group: Int64, limit: Int, cursor: String?) async throws -> ActivityListBody {
        let before = try cursor.map { text -> Int64 in
            guard text.hasPrefix("a"), let id = Int64(text.dropFirst()), id >= 0 else {
                throw APIError.badRequest("cursor: not a cursor from this list (use nextCursor as returned)")
            }
            return id
        }
        guard let page = try await store.activity(project: project.id, group: group, before: before, limit: limit + 1) else {
            throw APIError.noCrashGroup(group, in: project)
        }
        // The timeline: the stored entries, then the group's creation (id 0, the oldest).
        let created = ActivityEntry(id: "0", at: page.created, type: .created, actor: Principal.system.name, data: [:])
        let all = page.entries + (page.entries.count > limit ? [] : [created])
        let shown = Array(all.prefix(limit))
        let next = all.count > limit ? shown.last.map { "a\($0.id)" } : nil
        return ActivityListBody(activity: shown, nextCursor: next)
    }

    /// Adds a comment of 1 to ``maxCommentBytes`` bytes (else a 400 naming `text`).
    func comment(_ project: ProjectRef, group: Int64, text: String?, actor: Principal) async throws -> ActivityEntry {
        guard let text, (1...Self.maxCommentBytes).contains(text.utf8.count) else {
            throw APIError.badRequest("text: required, a string of 1 to \(Self.maxCommentBytes) bytes")
        }
        guard let entry = try await store.comment(project: project.id, group: group, text: text, actor: actor) else {
            throw APIError.noCrashGroup(group, in: project)
        }
        return entry
    }

    /// Merges `group` into the group `into` names (triage.md) and answers the target as the list
    /// shows it: 400 naming `into` when it is absent or not a string, for a cycle, or when
    /// `group` is itself merged; 404 for a group or target the project does not have.
    func merge(_ project: ProjectRef, group: Int64, into: String?, actor: Principal) async throws -> GroupBody {
        guard let into else { throw APIError.badRequest(#"into: required, the id of the group to merge into as a string, like {"into": "12"}"#) }
        guard let target = Int64(into), target > 0 else { throw APIError.notFound("no crash group '\(into)' in project '\(project.slug)'") }
        switch try await store.merge(project: project.id, source: group, into: target, actor: actor) {
        case .merged(let target): return try await body(project, group: target)
        case .unknownSource: throw APIError.noCrashGroup(group, in: project)
        case .unknownTarget: throw APIError.noCrashGroup(target, in: project)
        case .sourceMerged(let current):
            throw APIError.badRequest("into: group \(group) is merged into group \(current); unmerge it first")
        case .cycle:
            throw APIError.badRequest("into: group \(target) is group \(group) or merged into it; a group cannot be merged into itself")
        }
    }

    /// Gives `group` (merged into `target`) its reports back and answers the target: 400 naming
    /// `group` when it is absent, not a string or not merged into `target`; 404 for a target
    /// the project does not have.
    func unmerge(_ project: ProjectRef, target: Int64, group: String?, actor: Principal) async throws -> GroupBody {
        guard let group else { throw APIError.badRequest(#"group: required, the id of the merged group as a string, like {"group": "12"}"#) }
        let source = Int64(group) ?? 0
        switch try await store.unmerge(project: project.id, target: target, source: source, actor: actor) {
        case .unmerged: return try await body(project, group: target)
        case .unknownTarget: throw APIError.noCrashGroup(target, in: project)
        case .notMerged: throw APIError.badRequest("group: '\(group)' is not a group merged into group \(target)")
        }
    }

    /// The group as the list shows it over the default window.
    func body(_ project: ProjectRef, group: Int64) async throws -> GroupBody {
        let window = TimeWindow.lastSevenDays()
        return try await queries.read(project) { reader -> GroupBody in
            guard let body = try await reader.groupBody(project: project.id, group: group, window: window) else {
                throw APIError.noCrashGroup(group, in: project)
            }
            return body
        }
    }
}
