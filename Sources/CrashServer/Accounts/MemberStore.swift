import Foundation
import Hummingbird

/// A project member: a user and its role there.
struct ProjectMember: Sendable, Codable, Equatable, ResponseEncodable {
    var email: String
    var name: String
    var role: ProjectRole
}

/// Who may do what on which project (accounts.md, "Projects, members, roles").
protocol MemberStore: Sendable {
    /// The project named `slug` and `user`'s role on it: a server admin is `admin` on every
    /// project; anyone else has the role they were given, or nil (the project is then "not
    /// found" for them, as for a project that does not exist).
    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)?
    /// The projects `user` may open, by slug, with the role on each.
    func projects(user: User) async throws -> [(ProjectRef, ProjectRole)]
    /// A project's members, by e-mail.
    func members(project: Int64) async throws -> [ProjectMember]
    /// Gives `user` `role` on `project` (replacing the one it had).
    func setRole(project: Int64, user: Int64, role: ProjectRole) async throws
    /// Takes `user`'s role on `project` away; false when it had none.
    func remove(project: Int64, user: Int64) async throws -> Bool
    /// Gives `user` `role` on every project where it has none yet (single sign-on's default role).
    func grantOnEveryProject(user: Int64, role: ProjectRole) async throws
}
