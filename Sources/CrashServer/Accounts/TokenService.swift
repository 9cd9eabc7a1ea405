import Foundation

/// Creates a user's API tokens, as `POST /v1/tokens` and the dashboard's Tokens page both do:
/// the checks, the secret, the stored hash and the audit entry.
struct TokenService<Tokens: TokenStore, Members: MemberStore>: Sendable {
    let tokens: Tokens
    let members: Members
    let audit: AuditLog

    /// A new token of `user` and its secret (shown once). 400 naming the field for a bad name,
    /// scope, project or expiry; 403 when `creator` (the token making this request) lacks one
    /// of the scopes asked for.
    func create(
        for user: User, name rawName: String, scopes raw: [String]?, projects: [String]?, expiresAt: Date?, creator: APIToken?,
        by actor: Principal, address: String?
    ) async throws -> (APIToken, String) {
        let name = rawName.trimmingCharacters(in: .whitespacesAndNewlines)
        guard (1...100).contains(name.utf8.count) else { throw APIError.badRequest("name: 1 to 100 bytes") }
        guard let raw, !raw.isEmpty, raw.count <= TokenScope.allCases.count * 2 else {
            throw APIError.badRequest("scopes: a non-empty array of scopes")
        }
        var scopes: [TokenScope] = []
        for text in raw {
            guard let scope = TokenScope(rawValue: text) else { throw APIError.badRequest("scopes: unknown scope '\(text)'") }
            if !scopes.contains(scope) { scopes.append(scope) }
        }
        // A token that creates tokens cannot hand out more than it has.
        if let creator, let extra = scopes.first(where: { !creator.scopes.contains($0) }) {
            throw AccountError.missingScope(extra)
        }
        if let projects {
            guard (1...100).contains(projects.count) else { throw APIError.badRequest("projects: 1 to 100 slugs, or null for all") }
            for slug in projects where try await members.access(user: user, project: slug) == nil {
                throw APIError.badRequest("projects: no project '\(slug)'")
            }
        }
        if let expiresAt, expiresAt <= Date() { throw APIError.badRequest("expiresAt: must be in the future") }
        let secret = APITokenSecret.generate()
        let token = try await tokens.create(
            user: user.id, name: name, secretHash: ProjectKeys.hash(secret), scopes: scopes, projects: projects, expiresAt: expiresAt)
        await audit.record("token.create", by: actor, target: "\(token.id) \(name)", address: address)
        return (token, secret)
    }

    /// Deletes one of `user`'s tokens; 404 when it has none with this id.
    func revoke(_ text: String, of user: User, by actor: Principal, address: String?) async throws {
        guard let id = Int64(text), id > 0, try await tokens.revoke(user: user.id, id: id) else {
            throw APIError.notFound("no token '\(text)'")
        }
        await audit.record("token.revoke", by: actor, target: text, address: address)
    }
}
