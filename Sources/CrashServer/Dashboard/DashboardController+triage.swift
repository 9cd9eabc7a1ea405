import CrashWire
import Foundation
import Hummingbird
import Logging

/// The crash page's triage panel (assignee, snooze choices, merge: DashboardController+merge.swift,
/// the activity timeline and a comment form) and the list's bulk form: plain HTML forms, each with the CSRF token, posted
/// to the routes below and answered with a redirect, so no JavaScript is needed. They go
/// through the REST routes' ``TriageService``, acting as the request's principal.
extension DashboardController {
    func addTriageRoutes(to group: some RouterMethods<CrashRequestContext>) {
        group.post("/projects/:project/crashes/bulk", use: bulkTriage)
        group.post("/projects/:project/crashes/:id/assign", use: assign)
        group.post("/projects/:project/crashes/:id/snooze", use: snooze)
        group.post("/projects/:project/crashes/:id/comments", use: addComment)
        addMergeRoutes(to: group)
    }

    /// Entries of the timeline the crash page shows (newest first).
    static var activityShown: Int { 50 }

    /// The snooze choices of the crash page: `for` values and their labels.
    static var snoozeChoices: [(value: String, label: String)] {
        [
            ("1h", "1 hour"), ("24h", "24 hours"), ("7d", "7 days"), ("count10", "10 more reports"), ("count100", "100 more reports"),
            ("devices10", "10 more devices"), ("devices100", "100 more devices"),
        ]
    }

    /// A snooze choice as its condition, `now` the time a time choice counts from.
    static func snoozeCondition(_ choice: String, now: Date = Date()) throws -> SnoozeCondition {
        switch choice {
        case "1h": return .until(now.addingTimeInterval(3600))
        case "24h": return .until(now.addingTimeInterval(86_400))
        case "7d": return .until(now.addingTimeInterval(7 * 86_400))
        case "count10": return .count(10)
        case "count100": return .count(100)
        case "devices10": return .devices(10)
        case "devices100": return .devices(100)
        default: throw APIError.badRequest("for: must be one of \(snoozeChoices.map(\.value).joined(separator: ", "))")
        }
    }

    /// The crash page's triage panel for `group`.
    func triagePanel(_ project: ProjectRef, group: GroupBody, csrf: String, now: Date) async throws -> TriagePanelView {
        let id = Int64(group.id) ?? 0
        let activity = try await store.triage.activity(project, group: id, limit: Self.activityShown, cursor: nil)
        var snoozed: String?
        if let snooze = group.snoozed {
            if let until = snooze.until {
                snoozed = "Snoozed until \(DashboardFormat.exact(until))"
            } else if let n = snooze.untilCount {
                snoozed = "Snoozed until \(n) more reports (\(snooze.count ?? 0) so far)"
            } else if let n = snooze.untilDevices {
                snoozed = "Snoozed until \(n) more devices (\(snooze.devices ?? 0) so far)"
            }
        }
        return TriagePanelView(
            csrf: csrf, project: project.slug, groupID: group.id, assignee: group.assignee ?? "", isAssigned: group.assignee != nil,
            snoozed: snoozed, snoozeChoices: Self.snoozeChoices.map { SnoozeChoiceView(value: $0.value, label: $0.label) },
            activity: activity.activity.map { ActivityView($0, now: now) }, moreActivity: activity.nextCursor != nil,
            merge: try await mergePanel(project, group: group))
    }

    /// The assignee form: an address assigns, an empty field unassigns.
    @Sendable func assign(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id, form) = try await triageForm(request, context, as: AssignForm.self)
        let text = (form.assignee ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.isEmpty || GroupChange.isAssignee(text) else {
            throw APIError.badRequest("assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or empty")
        }
        _ = try await store.triage.update(project, group: id, GroupChange(assignee: .some(text.isEmpty ? nil : text)), actor: context.principal)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(id)#triage-actions")
    }

    /// The snooze buttons: ignored until one of ``snoozeChoices``.
    @Sendable func snooze(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id, form) = try await triageForm(request, context, as: SnoozeForm.self)
        let change = GroupChange(status: .ignored, snooze: try Self.snoozeCondition(form.for ?? ""))
        _ = try await store.triage.update(project, group: id, change, actor: context.principal)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(id)?triaged=ignored")
    }

    /// The comment form.
    @Sendable func addComment(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id, form) = try await triageForm(request, context, as: CommentForm.self)
        _ = try await store.triage.comment(project, group: id, text: form.text, actor: context.principal)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(id)#activity")
    }

    /// The list's bulk form: resolve, ignore or assign the checked groups, or every group the
    /// list's filters match (`scope=all`, the same filters as the page: hidden fields).
    @Sendable func bulkTriage(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let form = try await Self.form(request, as: BulkForm.self)
        guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else { throw DashboardError.forbidden }
        var change = GroupChange()
        switch form.action {
        case "resolve": change.status = .resolved
        case "ignore": change.status = .ignored
        case "assign":
            let text = (form.assignee ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.isEmpty || GroupChange.isAssignee(text) else {
                throw APIError.badRequest("assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or empty")
            }
            change.assignee = .some(text.isEmpty ? nil : text)
        default: throw APIError.badRequest("action: must be resolve, ignore or assign")
        }
        let filters = form.filterValues
        let updated: Int
        if form.scope == "all" {
            let list = try DashboardQuery(values: filters).crashList(project: project, limit: 1)
            updated = try await store.triage.bulkUpdate(project, list: list, change, actor: context.principal)
        } else {
            let ids = (form.group ?? []).compactMap { Int64($0) }
            guard !ids.isEmpty else { throw APIError.badRequest("group: check at least one group, or apply to all matching") }
            guard ids.count <= TriageService<Store.Triage, Store.Queries>.maxBulkGroups else {
                throw APIError.badRequest("group: at most \(TriageService<Store.Triage, Store.Queries>.maxBulkGroups) at once")
            }
            updated = try await store.triage.store.apply(change, to: ids, project: project.id, actor: context.principal).count
        }
        logger.info("dashboard bulk triage", metadata: ["project.slug": "\(project.slug)", "groups.updated": "\(updated)"])
        var values = filters
        values["updated"] = String(updated)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes" + DashboardQuery.string(values))
    }

    /// The list's bulk form, with the page's filters as hidden fields.
    func bulkView(csrf: String, query: DashboardQuery, count: Int) -> BulkView {
        BulkView(
            csrf: csrf,
            hidden: query.values.filter { $0.key != "cursor" && $0.key != "triaged" }.sorted { $0.key < $1.key }
                .map { HiddenField(name: $0.key, value: $0.value) }, count: count)
    }

    /// A signed-in triage form for one group: its session, CSRF token and group id.
    func triageForm<Form: Decodable & CSRFForm>(
        _ request: Request, _ context: CrashRequestContext, as _: Form.Type
    ) async throws -> (ProjectRef, Int64, Form) {
        let (session, project) = try await signedIn(request, context)
        let id = try Self.groupID(context)
        let form = try await Self.form(request, as: Form.self)
        guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else { throw DashboardError.forbidden }
        return (project, id, form)
    }
}

/// A form that carries the CSRF token.
protocol CSRFForm { var csrf: String? { get } }

struct AssignForm: Decodable, CSRFForm {
    var assignee: String?
    var csrf: String?
}

struct SnoozeForm: Decodable, CSRFForm {
    var `for`: String?
    var csrf: String?
}

struct CommentForm: Decodable, CSRFForm {
    var text: String?
    var csrf: String?
}

/// The list's bulk form: the action, the checked groups (`group[]`) or `scope=all`, and the
/// page's filters.
struct BulkForm: Decodable {
    var action: String?
    var assignee: String?
    var scope: String?
    var group: [String]?
    var csrf: String?
    var window: String?, status: String?, version: String?, os: String?, kind: String?, environment: String?, q: String?, app: String?

    /// The page's filters as the list reads them.
    var filterValues: [String: String] {
        let pairs: [(String, String?)] = [
            ("window", window), ("status", status), ("version", version), ("os", os), ("kind", kind), ("environment", environment),
            ("q", q), ("app", app),
        ]
        var out: [String: String] = [:]
        for (key, value) in pairs { if let value, !value.isEmpty { out[key] = value } }
        return out
    }
}

/// The crash page's triage panel (triagepanel.mustache).
struct TriagePanelView: Sendable {
    var csrf: String
    var project: String
    var groupID: String
    var assignee: String
    var isAssigned: Bool
    var snoozed: String?
    var snoozeChoices: [SnoozeChoiceView]
    var activity: [ActivityView]
    var moreActivity: Bool
    var merge: MergePanelView
}

struct SnoozeChoiceView: Sendable {
    var value: String
    var label: String
}

/// One entry of the timeline: when, who, and what in words.
struct ActivityView: Sendable {
    var type: String
    var time: String
    var timeExact: String
    var actor: String
    var summary: String
    /// A comment's text, shown as written (escaped).
    var comment: String?

    init(_ entry: ActivityEntry, now: Date) {
        type = entry.type.rawValue
        time = DashboardFormat.relative(entry.at, now: now)
        timeExact = DashboardFormat.exact(entry.at)
        actor = entry.actor
        func text(_ key: String) -> String? {
            switch entry.data[key] {
            case .string(let s): s
            case .time(let d): DashboardFormat.exact(d)
            case .int(let n): String(n)
            case .null, nil: nil
            }
        }
        let condition =
            text("until").map { "until \($0)" } ?? text("untilCount").map { "until \($0) more reports" }
            ?? text("untilDevices").map { "until \($0) more devices" } ?? ""
        switch entry.type {
        case .created: summary = "first report"
        case .resolved: summary = text("resolvedIn").map { "resolved in \($0)" } ?? "resolved"
        case .ignored: summary = "ignored"
        case .snoozed: summary = "snoozed \(condition)"
        case .reopened: summary = "reopened"
        case .regressed: summary = text("version").map { "regressed in \($0)" } ?? "regressed"
        case .reappeared: summary = "reappeared (snoozed \(condition))"
        case .assigned: summary = "assigned to \(text("assignee") ?? "")"
        case .unassigned: summary = "unassigned \(text("assignee") ?? "")"
        case .merged: summary = "merged #\(text("group") ?? "") into #\(text("into") ?? "")"
        case .unmerged: summary = "unmerged #\(text("group") ?? "") from #\(text("into") ?? "")"
        case .comment: summary = "commented"
        }
        comment = entry.type == .comment ? text("text") : nil
    }
}

/// The list's bulk form (bulk.mustache).
struct BulkView: Sendable {
    var csrf: String
    var hidden: [HiddenField]
    /// Groups on the page.
    var count: Int
}

struct HiddenField: Sendable {
    var name: String
    var value: String
}
