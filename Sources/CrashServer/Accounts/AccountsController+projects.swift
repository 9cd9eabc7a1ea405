import CrashGrouping
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

extension AccountsController {
    /// `POST /v1/projects` with `{"name": slug, "grouping": "v1" | "v2"}` (grouping optional):
    /// a server admin creates a project, as `crash-server project create` does (accounts.md).
    struct NewProject: Decodable {
        var name: String?
        var grouping: String?
    }

    /// 201 with the keys `project create` prints, shown this once; 403 for anyone but a server
    /// admin (an API token needs `project:admin`), 409 for a name taken.
    @Sendable func createProject(request: Request, context: CrashRequestContext) async throws -> Response {
        let user = try Self.requireUser(context)
        guard user.isAdmin else { throw AccountError.forbidden("only a server admin creates projects") }
        let body = try await Self.decode(NewProject.self, request, context)
        guard let slug = body.name, ProjectKeys.isValidSlug(slug) else {
            throw APIError.badRequest("name: a project slug, [a-z0-9][a-z0-9-]{0,63}")
        }
        var grouping = GroupingVersion.newProjectDefault
        if let name = body.grouping {
            guard let version = GroupingVersion(rawValue: name) else { throw APIError.badRequest("grouping: must be v1 or v2") }
            grouping = version
        }
        let created: ProjectCredentials
        do {
            created = try await projects.create(slug: slug, grouping: grouping, by: context.principal, address: context.clientAddress)
        } catch let error as ProjectError where error.alreadyExists {
            throw AccountError.conflict("name: a project '\(slug)' exists (its keys are unchanged)")
        }
        return JSONResponse.response(.created, ByteBuffer(string: try created.json(publicURL: publicURL)))
    }
}
