import Foundation

/// Adds, changes and removes project members, recording each change in the audit log: what
/// `PUT`/`DELETE /v1/projects/{project}/members/{email}` and the dashboard's members page share.
struct MembershipService<Users: UserStore, Members: MemberStore>: Sendable {
    let users: Users
    let members: Members
    let audit: AuditLog

    /// Gives the user with `email` `role` on `project`; 404 when there is no such enabled user.
    func set(email: String, role: ProjectRole, on project: ProjectRef, by actor: Principal, address: String?) async throws {
        guard let user = try await users.user(email: email), !user.disabled else { throw APIError.notFound("no user '\(email)'") }
        try await members.setRole(project: project.id, user: user.id, role: role)
        await audit.record("member.set", by: actor, project: project, target: "\(user.email) \(role.rawValue)", address: address)
    }

    /// Takes the user's role on `project` away; 404 when it is not a member.
    func remove(email: String, from project: ProjectRef, by actor: Principal, address: String?) async throws {
        guard let user = try await users.user(email: email), try await members.remove(project: project.id, user: user.id) else {
            throw APIError.notFound("no member '\(email)' in project '\(project.slug)'")
        }
        await audit.record("member.remove", by: actor, project: project, target: user.email, address: address)
    }
}
