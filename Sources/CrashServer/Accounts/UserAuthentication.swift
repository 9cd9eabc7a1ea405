import Foundation
import HTTPTypes
import Hummingbird

/// Authenticates the accounts API (members, tokens, audit): an API token with the route's
/// scope (``RouteScopes``), or the dashboard's session cookie; on a project's route the user's
/// role must grant that scope, and the project goes into ``CrashRequestContext/readProject``.
/// A read token is refused (403): these routes act for a person. A cookie-authenticated write
/// must be `Content-Type: application/json` (a cross-site form cannot send that, and the
/// cookie is `SameSite=Strict` besides).
struct UserAuthenticationMiddleware: RouterMiddleware {
    typealias Context = CrashRequestContext
    let accounts: AccountService<PostgresUserStore>
    let tokens: PostgresTokenStore
    let members: PostgresMemberStore

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let scope = RouteScopes.scope(method: request.method, path: context.endpointPath)
        let slug = context.parameters.get("project")
        if let secret = ReadAuthenticationMiddleware<PostgresProjectStore>.bearer(request) {
            guard APITokenSecret.isToken(secret) else {
                throw AccountError.forbidden("a project read token cannot do this: use an API token (Bearer cgt_...)")
            }
            let found: (APIToken, User)?
            do {
                found = try await tokens.token(secretHash: ProjectKeys.hash(secret))
            } catch  where isConnectionError(error) {
                throw APIError.databaseUnreachable
            }
            guard let (token, user) = found else { throw APIError.unauthorized("unknown, expired or revoked API token") }
            guard let scope else { throw AccountError.forbidden("this route takes no API token") }
            if let slug {
                context.readProject = try await ScopeCheck.project(
                    token: token, user: user, slug: slug, method: request.method, path: context.endpointPath, lookup: members)
            } else if !token.scopes.contains(scope) {
                throw AccountError.missingScope(scope)
            }
            context.user = user
            context.apiToken = token
            context.principal = token.principal(of: user)
        } else if let value = request.cookies[accounts.cookies.cookieName]?.value, let user = try await accounts.user(sessionCookie: value) {
            if request.method != .get && request.method != .head && request.method != .delete {
                guard let type = request.headers[.contentType], type.lowercased().hasPrefix("application/json") else {
                    throw APIError.unsupportedMediaType("Content-Type: must be application/json")
                }
            }
            if let slug {
                guard let (project, role) = try await members.access(user: user, project: slug) else {
                    throw APIError.notFound("no project '\(slug)'")
                }
                if let scope, !role.scopes.contains(scope) { throw AccountError.missingScope(scope) }
                context.readProject = project
            }
            context.user = user
            context.principal = user.principal
        } else {
            throw APIError.unauthorized("sign in, or use an API token (Authorization: Bearer cgt_...)")
        }
        return try await next(request, context)
    }
}

extension PostgresMemberStore: AccountLookup {
    func apiToken(secret: String) async throws -> (APIToken, User)? {
        try await PostgresTokenStore(client: client, logger: logger).token(secretHash: ProjectKeys.hash(secret))
    }
}
