import Foundation
import HTTPTypes
import Hummingbird

/// API tokens: `cgt_` and 256 random bits (base64url), stored as their SHA-256.
enum APITokenSecret {
    static let prefix = "cgt_"

    /// A new secret, shown once.
    static func generate() -> String { prefix + DashboardSessions.randomID() }

    /// Whether a bearer credential is shaped like an API token (and so is looked up as one).
    static func isToken(_ credential: String) -> Bool { credential.hasPrefix(prefix) }
}

/// Where API tokens and roles are looked up; ``PostgresQueryStore`` and ``PostgresProjectStore``
/// answer through the accounts tables, a store without accounts knows no token.
protocol AccountLookup: Sendable {
    /// The unexpired token with this secret and its enabled user.
    func apiToken(secret: String) async throws -> (APIToken, User)?
    /// The project named `slug` and `user`'s role there (nil: not a project the user may open).
    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)?
    /// The audit log changes are recorded in; nil: none.
    var auditLog: AuditLog? { get }
}

extension AccountLookup {
    func apiToken(secret: String) async throws -> (APIToken, User)? { nil }
    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)? { nil }
    var auditLog: AuditLog? { nil }
}

extension PostgresQueryStore {
    var auditLog: AuditLog? { AuditLog(store: PostgresAuditStore(database: database), logger: database.logger) }
    func apiToken(secret: String) async throws -> (APIToken, User)? {
        try await PostgresTokenStore(database: database).token(secretHash: ProjectKeys.hash(secret))
    }
    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)? {
        try await PostgresMemberStore(database: database).access(user: user, project: slug)
    }
}

extension PostgresProjectStore {
    var auditLog: AuditLog? { AuditLog(store: PostgresAuditStore(client: client, logger: logger), logger: logger) }
    func apiToken(secret: String) async throws -> (APIToken, User)? {
        try await PostgresTokenStore(client: client, logger: logger).token(secretHash: ProjectKeys.hash(secret))
    }
    func access(user: User, project slug: String) async throws -> (ProjectRef, ProjectRole)? {
        try await PostgresMemberStore(client: client, logger: logger).access(user: user, project: slug)
    }
}

/// What a signed-in user (an API token's owner) may do on a project's route.
enum ScopeCheck {
    /// The project `token` opens for `slug` on the route of `method`/`path`: 404 for a
    /// project outside the token's list or the user's projects, 403 `missing scope <scope>` when
    /// the token lacks the route's scope or the user's current role no longer grants it.
    static func project(
        token: APIToken, user: User, slug: String, method: HTTPRequest.Method, path: String?, lookup: some AccountLookup
    ) async throws -> ProjectRef {
        guard let scope = RouteScopes.scope(method: method, path: path) else {
            throw AccountError.forbidden("this route takes no API token")
        }
        guard token.projects?.contains(slug) ?? true, let (project, role) = try await lookup.access(user: user, project: slug) else {
            throw APIError.notFound("no project '\(slug)'")
        }
        guard token.scopes.contains(scope), role.scopes.contains(scope) else { throw AccountError.missingScope(scope) }
        return project
    }
}
