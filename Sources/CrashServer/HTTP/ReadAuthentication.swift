import Hummingbird

/// What read authentication needs from storage: the project a read token belongs to, and
/// API tokens and roles (``AccountLookup``). ``QueryStore`` and ``ProjectStore`` both answer it.
protocol ReadTokenLookup: AccountLookup {
    /// The project a read token belongs to, or nil.
    func project(readToken: String) async throws -> ProjectRef?
}

/// Authenticates the read routes of `/v1/projects/{project}/...`: resolves the read token,
/// or an API token (`cgt_...`, docs/accounts.md), and puts the project into
/// ``CrashRequestContext/readProject`` before the handler runs. An API token also sets
/// ``CrashRequestContext/user`` and ``CrashRequestContext/principal``, and must carry the
/// route's scope (``RouteScopes``) within its user's current role (403 otherwise).
///
/// 401 without a valid token, 404 when the token belongs to another project (which so
/// cannot learn what exists). Only a connection failure is the database being
/// "unavailable" (503 with `Retry-After`); any other storage error stays an error (500).
struct ReadAuthenticationMiddleware<Store: ReadTokenLookup>: RouterMiddleware {
    typealias Context = CrashRequestContext

    let store: Store

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let slug = context.parameters.get("project") ?? ""
        if let secret = Self.bearer(request), APITokenSecret.isToken(secret) {
            let found: (APIToken, User)?
            do {
                found = try await store.apiToken(secret: secret)
            } catch  where isConnectionError(error) {
                throw APIError.databaseUnreachable
            }
            guard let (token, user) = found else { throw APIError.unauthorized("unknown, expired or revoked API token") }
            context.readProject = try await ScopeCheck.project(
                token: token, user: user, slug: slug, method: request.method, path: context.endpointPath, lookup: store)
            context.user = user
            context.principal = token.principal(of: user)
            context.apiToken = token
        } else {
            context.readProject = try await authenticate(request, slug: slug)
        }
        let response = try await next(request, context)
        if let log = store.auditLog { await AuditTrail.record(request, context, status: response.status, in: log) }
        return response
    }

    /// The credential of an `Authorization: Bearer <credential>` header.
    static func bearer(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return parts[1].trimmingWhitespace()
    }

    func authenticate(_ request: Request, slug: String) async throws -> ProjectRef {
        guard let header = request.headers[.authorization] else {
            throw APIError.unauthorized("missing Authorization: Bearer <read token>")
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw APIError.unauthorized("Authorization must be: Bearer <read token>")
        }
        let token = parts[1].trimmingWhitespace()
        let project: ProjectRef?
        do {
            project = try await store.project(readToken: token)
        } catch  where isConnectionError(error) {
            throw APIError.databaseUnreachable
        }
        guard let project else { throw APIError.unauthorized("unknown read token") }
        guard project.slug == slug else { throw APIError.notFound("no project '\(slug)'") }
        return project
    }
}

extension CrashRequestContext {
    /// The project ``ReadAuthenticationMiddleware`` authenticated; a route without the
    /// middleware is a programming error, answered 401 rather than served unauthenticated.
    func requireReadProject() throws -> ProjectRef {
        guard let readProject else { throw APIError.unauthorized("missing Authorization: Bearer <read token>") }
        return readProject
    }
}
