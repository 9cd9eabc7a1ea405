import Hummingbird

extension CrashRequestContext {
    /// The `:id` of a group route; 404 (not 400) for one that cannot be a group id, as for an
    /// unknown group.
    func groupID() throws -> Int64 {
        guard let id = try? parameters.require("id", as: Int64.self), id > 0 else {
            throw APIError.notFound("no crash group '\(parameters.get("id") ?? "")'")
        }
        return id
    }
}
