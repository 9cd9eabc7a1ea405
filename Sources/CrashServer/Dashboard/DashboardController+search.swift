import Foundation

extension DashboardController {
    /// The crashes page's search box (its `q`, written back as typed) and the environment
    /// selector: the project's environments with reports, the chosen one selected.
    func searchBox(_ project: ProjectRef, query: DashboardQuery) async throws -> (String, [KindOption]) {
        let chosen = query.values["environment"]
        var names = try await store.queries.environments(project)
        if let chosen, !names.contains(chosen) { names.append(chosen) }
        return (query.values["q"] ?? "", names.map { KindOption(value: $0, selected: $0 == chosen) })
    }
}
