import Hummingbird

/// What read authentication needs from storage: the project a read token belongs to.
/// ``QueryStore`` and ``ProjectStore`` both answer it.
protocol ReadTokenLookup: Sendable {
    /// The project a read token belongs to, or nil.
    func project(readToken: String) async throws -> ProjectRef?
}

/// Authenticates the read routes of `/v1/projects/{project}/...`: resolves the read token
/// and puts the project into ``CrashRequestContext/readProject`` before the handler runs.
///
/// 401 without a valid read token, 404 when the token belongs to another project (which so
/// cannot learn what exists). Only a connection failure is the database being
/// "unavailable" (503 with `Retry-After`); any other storage error stays an error (500).
struct ReadAuthenticationMiddleware<Store: ReadTokenLookup>: RouterMiddleware {
    typealias Context = CrashRequestContext

    let store: Store

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.readProject = try await authenticate(request, slug: context.parameters.get("project") ?? "")
        return try await next(request, context)
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
