import Foundation
import Logging
import PostgresNIO

/// ``TokenStore`` in `api_tokens`, on the primary (a revoked token fails on the next request).
struct PostgresTokenStore: PrimaryClientStore, TokenStore {
    let client: PostgresClient
    let logger: Logger

    private static let columns = "t.id, t.name, t.scopes, t.projects, t.expires_at, t.created_at, t.last_used_at"

    private typealias Row = (Int64, String, [String], [String]?, Date?, Date, Date?)

    private static func token(_ row: Row) -> APIToken {
        APIToken(
            id: String(row.0), name: row.1, scopes: row.2.compactMap(TokenScope.init(rawValue:)), projects: row.3,
            expiresAt: row.4, createdAt: row.5, lastUsedAt: row.6)
    }

    func create(
        user: Int64, name: String, secretHash: Data, scopes: [TokenScope], projects: [String]?, expiresAt: Date?
    ) async throws -> APIToken {
        let rows = try await client.query(
            """
            INSERT INTO api_tokens AS t (user_id, name, token_hash, scopes, projects, expires_at)
            VALUES (\(user), \(name), \(secretHash), \(scopes.map(\.rawValue)), \(projects), \(expiresAt))
            RETURNING \(unescaped: Self.columns)
            """, logger: logger)
        for try await row in rows.decode(Row.self) { return Self.token(row) }
        throw APIError.unavailable("token not stored")
    }

    func tokens(user: Int64) async throws -> [APIToken] {
        let rows = try await client.query(
            "SELECT \(unescaped: Self.columns) FROM api_tokens t WHERE t.user_id = \(user) ORDER BY t.id DESC", logger: logger)
        var out: [APIToken] = []
        for try await row in rows.decode(Row.self) { out.append(Self.token(row)) }
        return out
    }

    func revoke(user: Int64, id: Int64) async throws -> Bool {
        let rows = try await client.query(
            "DELETE FROM api_tokens WHERE id = \(id) AND user_id = \(user) RETURNING id", logger: logger)
        for try await _ in rows.decode(Int64.self) { return true }
        return false
    }

    func token(secretHash: Data) async throws -> (APIToken, User)? {
        let rows = try await client.query(
            """
            UPDATE api_tokens t SET last_used_at = now()
            FROM users u
            WHERE t.token_hash = \(secretHash) AND u.id = t.user_id AND u.disabled_at IS NULL
              AND (t.expires_at IS NULL OR t.expires_at > now())
            RETURNING \(unescaped: Self.columns), u.id, u.email, u.name, u.is_admin, u.password_hash IS NOT NULL
            """, logger: logger)
        for try await (t0, t1, t2, t3, t4, t5, t6, id, email, name, admin, hasPassword) in rows.decode(
            (Int64, String, [String], [String]?, Date?, Date, Date?, Int64, String, String, Bool, Bool).self)
        {
            let user = User(id: id, email: email, name: name, isAdmin: admin, disabled: false, hasPassword: hasPassword)
            return (Self.token((t0, t1, t2, t3, t4, t5, t6)), user)
        }
        return nil
    }
}
