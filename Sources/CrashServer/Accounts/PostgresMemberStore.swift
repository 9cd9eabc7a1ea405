import Foundation
import Logging
import PostgresNIO

/// A store of the accounts tables on the primary's pool: a change counts on every replica at
/// its next request.
protocol PrimaryClientStore {
    init(client: PostgresClient, logger: Logger)
}

extension PrimaryClientStore {
    /// On `database`'s primary.
    init(database: CrashDatabase) { self.init(client: database.client, logger: database.logger) }
}

/// ``MemberStore`` in `project_members`, on the primary (a removed member loses access at once).
struct PostgresMemberStore: PrimaryClientStore, MemberStore {
    let client: PostgresClient
    let logger: Logger

    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)? {
        let rows = try await client.query(
            """
            SELECT p.id, p.slug, CASE WHEN \(user.isAdmin) THEN 'admin' ELSE m.role END
            FROM projects p LEFT JOIN project_members m ON m.project_id = p.id AND m.user_id = \(user.id)
            WHERE p.slug = \(slug)
            """, logger: logger)
        for try await (id, slug, role) in rows.decode((Int64, String, String?).self) {
            guard let role = role.flatMap(ProjectRole.init(rawValue:)) else { return nil }
            return (ProjectRef(id: id, slug: slug), role)
        }
        return nil
    }

    func projects(user: User) async throws -> [(ProjectRef, ProjectRole)] {
        let rows = try await client.query(
            """
            SELECT p.id, p.slug, CASE WHEN \(user.isAdmin) THEN 'admin' ELSE m.role END
            FROM projects p LEFT JOIN project_members m ON m.project_id = p.id AND m.user_id = \(user.id)
            WHERE \(user.isAdmin) OR m.role IS NOT NULL ORDER BY p.slug
            """, logger: logger)
        var out: [(ProjectRef, ProjectRole)] = []
        for try await (id, slug, role) in rows.decode((Int64, String, String?).self) {
            if let role = role.flatMap(ProjectRole.init(rawValue:)) { out.append((ProjectRef(id: id, slug: slug), role)) }
        }
        return out
    }

    func members(project: Int64) async throws -> [ProjectMember] {
        let rows = try await client.query(
            """
            SELECT u.email, u.name, m.role FROM project_members m JOIN users u ON u.id = m.user_id
            WHERE m.project_id = \(project) ORDER BY lower(u.email)
            """, logger: logger)
        var out: [ProjectMember] = []
        for try await (email, name, role) in rows.decode((String, String, String).self) {
            if let role = ProjectRole(rawValue: role) { out.append(ProjectMember(email: email, name: name, role: role)) }
        }
        return out
    }

    func setRole(project: Int64, user: Int64, role: ProjectRole) async throws {
        try await client.query(
            """
            INSERT INTO project_members (project_id, user_id, role) VALUES (\(project), \(user), \(role.rawValue))
            ON CONFLICT (project_id, user_id) DO UPDATE SET role = EXCLUDED.role
            """, logger: logger)
    }

    func remove(project: Int64, user: Int64) async throws -> Bool {
        let rows = try await client.query(
            "DELETE FROM project_members WHERE project_id = \(project) AND user_id = \(user) RETURNING user_id", logger: logger)
        for try await _ in rows.decode(Int64.self) { return true }
        return false
    }

    func grantOnEveryProject(user: Int64, role: ProjectRole) async throws {
        try await client.query(
            """
            INSERT INTO project_members (project_id, user_id, role) SELECT id, \(user), \(role.rawValue) FROM projects
            ON CONFLICT (project_id, user_id) DO NOTHING
            """, logger: logger)
    }
}
