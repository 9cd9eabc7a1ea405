import Foundation
import Hummingbird

/// The crash page's merge panel (triage.md, "Merge and unmerge"): a form that merges the group
/// into one picked from the project's top groups (or typed by id), and on a merged group or a
/// merge target the unmerge buttons. Plain forms with the CSRF token, answered with a redirect
/// to the target's page, through the REST routes' ``TriageService``.
extension DashboardController {
    func addMergeRoutes(to group: some RouterMethods<CrashRequestContext>) {
        group.post("/projects/:project/crashes/:id/merge", use: mergeGroup)
        group.post("/projects/:project/crashes/:id/unmerge", use: unmergeGroup)
    }

    /// Groups offered as merge targets: the top of the default list.
    static var mergeChoices: Int { 50 }

    /// The merge panel of `group`: where it is merged, what is merged into it, and the targets
    /// to pick from (the top groups of the default list but itself).
    func mergePanel(_ project: ProjectRef, group: GroupBody) async throws -> MergePanelView {
        var choices: [MergeChoiceView] = []
        if group.mergedInto == nil {
            // The ranking and the rows' titles only: a list page would also compute devices,
            // versions and 50 hourly trends for a select that shows none of them.
            let list = try DashboardQuery(values: [:]).crashList(project: project, limit: Self.mergeChoices)
            choices = try await store.queries.rankedRows(project, list).filter { String($0.id) != group.id }.map {
                MergeChoiceView(id: String($0.id), title: $0.title)
            }
        }
        return MergePanelView(
            mergedInto: group.mergedInto, merged: group.merged.map { MergedGroupView(id: $0) }, choices: choices,
            canMerge: group.mergedInto == nil)
    }

    /// The merge form: `into` (a picked group) or `intoID` (a typed id, which wins when given).
    @Sendable func mergeGroup(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id, form) = try await triageForm(request, context, as: MergeForm.self)
        let typed = (form.intoID ?? "").trimmingCharacters(in: .whitespaces)
        let into = typed.isEmpty ? form.into : typed
        let target = try await store.triage.merge(project, group: id, into: into, actor: context.principal)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(target.id)#merge")
    }

    /// The unmerge buttons, posted to the target's page with the merged group.
    @Sendable func unmergeGroup(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id, form) = try await triageForm(request, context, as: UnmergeForm.self)
        _ = try await store.triage.unmerge(project, target: id, group: form.group, actor: context.principal)
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(form.group ?? "")#merge")
    }
}

struct MergeForm: Decodable, CSRFForm {
    var into: String?
    var intoID: String?
    var csrf: String?
}

struct UnmergeForm: Decodable, CSRFForm {
    var group: String?
    var csrf: String?
}

/// The crash page's merge panel (in triagepanel.mustache).
struct MergePanelView: Sendable {
    /// The group this one is merged into.
    var mergedInto: String?
    /// The groups merged into this one.
    var merged: [MergedGroupView]
    var choices: [MergeChoiceView]
    /// False for a merged group (unmerge it first).
    var canMerge: Bool
}

struct MergedGroupView: Sendable {
    var id: String
}

struct MergeChoiceView: Sendable {
    var id: String
    var title: String
}
