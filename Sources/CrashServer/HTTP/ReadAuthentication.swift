import Hummingbird

extension CrashDatabase {
    /// Authenticates a query request for `slug`: 401 without a valid read token, 404 when
    /// the token belongs to another project (which so cannot learn what exists).
    func authorizeRead(_ request: Request, slug: String) async throws -> ProjectRef {
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
            project = try await self.project(readToken: token)
        } catch {
            throw APIError.unavailable("database unreachable", retryAfter: 5)
        }
        guard let project else { throw APIError.unauthorized("unknown read token") }
        guard project.slug == slug else { throw APIError.notFound("no project '\(slug)'") }
        return project
    }
}
