import Foundation

/// A user's API token, as `GET /v1/tokens` lists it (never its secret).
struct APIToken: Sendable, Encodable, Equatable {
    var id: String
    var name: String
    var scopes: [TokenScope]
    /// The project slugs it is limited to; nil: all of its user's projects.
    var projects: [String]?
    var expiresAt: Date?
    var createdAt: Date
    var lastUsedAt: Date?

    /// The principal of requests made with this token.
    func principal(of user: User) -> Principal {
        Principal(kind: .token, id: id, name: "\(name) (\(user.name.isEmpty ? user.email : user.name))")
    }

    enum CodingKeys: String, CodingKey { case id, name, scopes, projects, expiresAt, createdAt, lastUsedAt }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        try c.encode(scopes, forKey: .scopes)
        try c.encode(projects, forKey: .projects)
        try c.encode(expiresAt, forKey: .expiresAt)
        try c.encode(createdAt, forKey: .createdAt)
        try c.encode(lastUsedAt, forKey: .lastUsedAt)
    }
}

/// API tokens (`cgt_...`), stored as the SHA-256 of the secret.
protocol TokenStore: Sendable {
    /// Stores a new token of `user`.
    func create(
        user: Int64, name: String, secretHash: Data, scopes: [TokenScope], projects: [String]?, expiresAt: Date?
    ) async throws -> APIToken
    /// `user`'s tokens, newest first.
    func tokens(user: Int64) async throws -> [APIToken]
    /// Deletes one of `user`'s tokens; false when it has none with this id.
    func revoke(user: Int64, id: Int64) async throws -> Bool
    /// The unexpired token with this secret and its enabled user, marking it used.
    func token(secretHash: Data) async throws -> (APIToken, User)?
}
