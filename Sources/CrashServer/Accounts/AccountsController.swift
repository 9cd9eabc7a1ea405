import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The accounts API (accounts.md): projects made by server admins, project members, API
/// tokens and the audit log. Only users
/// call it: with an API token (`Authorization: Bearer cgt_...`) carrying the route's scope, or
/// with the dashboard's session cookie; a project read token is refused (403).
struct AccountsController: Sendable {
    let users: PostgresUserStore
    let members: PostgresMemberStore
    let tokens: PostgresTokenStore
    let auditStore: PostgresAuditStore
    let audit: AuditLog
    let accounts: AccountService<PostgresUserStore>
    let projects: ProjectAdministration
    /// The server's public URL, for the Sentry DSN of a new project.
    let publicURL: String

    /// The routes on `database`; the session cookie is named as the dashboard names it for `publicURL`.
    init(database: CrashDatabase, publicURL: String, logger: Logger) {
        let cookies = DashboardSessions(secret: [], secure: DashboardSessions.securesCookies(publicURL: publicURL))
        users = PostgresUserStore(database: database)
        members = PostgresMemberStore(database: database)
        tokens = PostgresTokenStore(database: database)
        auditStore = PostgresAuditStore(database: database)
        audit = AuditLog(store: auditStore, logger: logger)
        accounts = AccountService(users: users, cookies: cookies, publicURL: publicURL, logger: logger)
        projects = ProjectAdministration(database: database, logger: logger)
        self.publicURL = publicURL
    }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let authentication = UserAuthenticationMiddleware(accounts: accounts, tokens: tokens, members: members)
        router.group("/v1/projects").add(middleware: authentication).post(use: createProject)
        let project = router.group("/v1/projects/:project/members").add(middleware: authentication)
        project.get(use: listMembers)
        project.get(":email", use: member)
        project.put(":email", use: setMember)
        project.delete(":email", use: removeMember)
        let tokenRoutes = router.group("/v1/tokens").add(middleware: authentication)
        tokenRoutes.post(use: createToken)
        tokenRoutes.get(use: listTokens)
        tokenRoutes.delete(":id", use: revokeToken)
        router.group("/v1/audit").add(middleware: authentication).get(use: auditEntries)
    }

    // MARK: - Members

    struct MembersBody: ResponseEncodable { var members: [ProjectMember] }
    struct RoleBody: Decodable { var role: String? }

    @Sendable func listMembers(request: Request, context: CrashRequestContext) async throws -> MembersBody {
        MembersBody(members: try await members.members(project: try context.requireReadProject().id))
    }

    @Sendable func member(request: Request, context: CrashRequestContext) async throws -> ProjectMember {
        let project = try context.requireReadProject()
        let email = context.parameters.get("email") ?? ""
        guard let found = try await members.members(project: project.id).first(where: { $0.email.lowercased() == email.lowercased() })
        else { throw APIError.notFound("no member '\(email)' in project '\(project.slug)'") }
        return found
    }

    @Sendable func setMember(request: Request, context: CrashRequestContext) async throws -> ProjectMember {
        let project = try context.requireReadProject()
        let email = context.parameters.get("email") ?? ""
        let body = try await Self.decode(RoleBody.self, request, context)
        guard let role = body.role.flatMap(ProjectRole.init(rawValue:)) else {
            throw APIError.badRequest("role: must be viewer, member or admin")
        }
        try await MembershipService(users: users, members: members, audit: audit)
            .set(email: email, role: role, on: project, by: context.principal, address: context.clientAddress)
        return try await member(request: request, context: context)
    }

    @Sendable func removeMember(request: Request, context: CrashRequestContext) async throws -> HTTPResponse.Status {
        let project = try context.requireReadProject()
        try await MembershipService(users: users, members: members, audit: audit)
            .remove(email: context.parameters.get("email") ?? "", from: project, by: context.principal, address: context.clientAddress)
        return .noContent
    }

    // MARK: - Tokens

    struct NewToken: Decodable {
        var name: String?
        var scopes: [String]?
        var projects: [String]?
        var expiresAt: Date?
    }

    /// A new token: its listing plus the secret, shown this once.
    struct CreatedToken: ResponseEncodable {
        var token: String
        var listing: APIToken

        enum CodingKeys: String, CodingKey { case token }

        func encode(to encoder: any Encoder) throws {
            try listing.encode(to: encoder)
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(token, forKey: .token)
        }
    }

    struct TokensBody: ResponseEncodable { var tokens: [APIToken] }

    @Sendable func createToken(request: Request, context: CrashRequestContext) async throws -> EditedResponse<CreatedToken> {
        let user = try Self.requireUser(context)
        let body = try await Self.decode(NewToken.self, request, context)
        let (token, secret) = try await TokenService(tokens: tokens, members: members, audit: audit).create(
            for: user, name: body.name ?? "", scopes: body.scopes, projects: body.projects, expiresAt: body.expiresAt,
            creator: context.apiToken, by: context.principal, address: context.clientAddress)
        return EditedResponse(status: .created, response: CreatedToken(token: secret, listing: token))
    }

    @Sendable func listTokens(request: Request, context: CrashRequestContext) async throws -> TokensBody {
        TokensBody(tokens: try await tokens.tokens(user: try Self.requireUser(context).id))
    }

    @Sendable func revokeToken(request: Request, context: CrashRequestContext) async throws -> HTTPResponse.Status {
        try await TokenService(tokens: tokens, members: members, audit: audit).revoke(
            context.parameters.get("id") ?? "", of: try Self.requireUser(context), by: context.principal, address: context.clientAddress)
        return .noContent
    }

    // MARK: - Audit

    struct AuditBody: ResponseEncodable {
        var entries: [AuditEntry]
        var nextCursor: String?

        enum CodingKeys: String, CodingKey { case entries, nextCursor }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(entries, forKey: .entries)
            try c.encode(nextCursor, forKey: .nextCursor)
        }
    }

    /// `GET /v1/audit?project&actor&from&to&cursor&limit`: newest first. A server admin sees
    /// everything; anyone else the entries of projects they are an admin of.
    @Sendable func auditEntries(request: Request, context: CrashRequestContext) async throws -> AuditBody {
        let user = try Self.requireUser(context)
        let q = QueryParameters(request)
        var query = AuditQuery(limit: try q.limit())
        if let slug = try q.string("project") {
            guard let (project, role) = try await members.access(user: user, project: slug) else {
                throw APIError.notFound("no project '\(slug)'")
            }
            guard role == .admin else { throw AccountError.forbidden("only a project admin reads its audit log") }
            query.project = project.id
        } else if !user.isAdmin {
            query.projects = try await members.projects(user: user).filter { $0.1 == .admin }.map(\.0.id)
        }
        query.actor = try q.string("actor")
        query.from = try q.date("from")
        query.to = try q.date("to")
        if let cursor = try q.string("cursor") {
            guard let id = Int64(cursor), id > 0 else { throw APIError.badRequest("cursor: not a cursor this server returned") }
            query.before = id
        }
        if let from = query.from, let to = query.to, from > to { throw APIError.badRequest("from: after to") }
        let entries = try await auditStore.entries(query)
        return AuditBody(entries: entries, nextCursor: entries.count == query.limit ? entries.last.map { String($0.id) } : nil)
    }

    // MARK: - Helpers

    static func requireUser(_ context: CrashRequestContext) throws -> User {
        guard let user = context.user else { throw APIError.unauthorized("sign in, or use an API token (Bearer cgt_...)") }
        return user
    }

    /// A JSON body of at most 64 KiB; a malformed one is a 400.
    static func decode<T: Decodable>(_ type: T.Type, _ request: Request, _ context: CrashRequestContext) async throws -> T {
        let buffer = try await request.body.collect(upTo: 64 * 1024)
        do {
            return try context.requestDecoder.decode(T.self, from: Data(buffer.readableBytesView))
        } catch {
            throw APIError.badRequest("body: not the JSON object this route takes")
        }
    }
}
