import Foundation
import Logging
import PostgresNIO

/// ``UserStore`` on the server's PostgreSQL, always on the primary: a session ended or a
/// user disabled on one replica counts on every other at its next request.
struct PostgresUserStore: UserStore {
    let database: CrashDatabase

    private var client: PostgresClient { database.client }
    private var logger: Logger { database.logger }

    /// The columns every user query selects, in ``User``'s order.
    private static let columns = "SELECT id, email, name, is_admin, disabled_at IS NOT NULL, password_hash IS NOT NULL FROM users"

    private func users(_ rows: PostgresRowSequence) async throws -> [User] {
        var out: [User] = []
        for try await (id, email, name, admin, disabled, hasPassword) in rows.decode((Int64, String, String, Bool, Bool, Bool).self) {
            out.append(User(id: id, email: email, name: name, isAdmin: admin, disabled: disabled, hasPassword: hasPassword))
        }
        return out
    }

    func createUser(email: String, name: String, admin: Bool) async throws -> User {
        do {
            let rows = try await client.query(
                """
                INSERT INTO users (email, name, is_admin) VALUES (\(email), \(name), \(admin))
                RETURNING id, email, name, is_admin, disabled_at IS NOT NULL, password_hash IS NOT NULL
                """, logger: logger)
            guard let user = try await users(rows).first else { throw AccountError.exists(email) }
            return user
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            throw AccountError.exists(email)
        }
    }

    func user(email: String) async throws -> User? {
        try await users(client.query("\(unescaped: Self.columns) WHERE lower(email) = lower(\(email))", logger: logger)).first
    }

    func user(id: Int64) async throws -> User? {
        try await users(client.query("\(unescaped: Self.columns) WHERE id = \(id)", logger: logger)).first
    }

    func users() async throws -> [User] {
        try await users(client.query("\(unescaped: Self.columns) ORDER BY lower(email), id", logger: logger))
    }

    func credentials(email: String) async throws -> (user: User, passwordHash: String?)? {
        let rows = try await client.query(
            """
            SELECT id, email, name, is_admin, disabled_at IS NOT NULL, password_hash FROM users WHERE lower(email) = lower(\(email))
            """, logger: logger)
        for try await (id, email, name, admin, disabled, hash) in rows.decode((Int64, String, String, Bool, Bool, String?).self) {
            return (User(id: id, email: email, name: name, isAdmin: admin, disabled: disabled, hasPassword: hash != nil), hash)
        }
        return nil
    }

    func disable(email: String) async throws -> User? {
        try await client.withTransactionEndingOnClose(logger: logger) { connection in
            let rows = try await connection.query(
                """
                UPDATE users SET disabled_at = coalesce(disabled_at, now()) WHERE lower(email) = lower(\(email))
                RETURNING id, email, name, is_admin, disabled_at IS NOT NULL, password_hash IS NOT NULL
                """, logger: logger)
            guard let user = try await users(rows).first else { return nil }
            try await connection.query("DELETE FROM user_sessions WHERE user_id = \(user.id)", logger: logger)
            try await connection.query("DELETE FROM api_tokens WHERE user_id = \(user.id)", logger: logger)
            try await connection.query("DELETE FROM user_setup_links WHERE user_id = \(user.id)", logger: logger)
            return user
        }
    }

    // MARK: - Set-up links

    func addSetupLink(user: Int64, tokenHash: Data, expires: Date) async throws {
        try await client.query(
            """
            WITH ended AS (DELETE FROM user_setup_links WHERE expires_at < now())
            INSERT INTO user_setup_links (token_hash, user_id, expires_at) VALUES (\(tokenHash), \(user), \(expires))
            """, logger: logger)
    }

    func setupLinkUser(tokenHash: Data) async throws -> User? {
        try await users(
            client.query(
                """
                \(unescaped: Self.columns) WHERE disabled_at IS NULL AND id = (
                    SELECT user_id FROM user_setup_links WHERE token_hash = \(tokenHash) AND expires_at > now())
                """, logger: logger)
        ).first
    }

    func useSetupLink(tokenHash: Data, passwordHash: String) async throws -> User? {
        try await users(
            client.query(
                """
                WITH used AS (
                    DELETE FROM user_setup_links WHERE token_hash = \(tokenHash) AND expires_at > now() RETURNING user_id
                )
                UPDATE users SET password_hash = \(passwordHash)
                WHERE id = (SELECT user_id FROM used) AND disabled_at IS NULL
                RETURNING id, email, name, is_admin, disabled_at IS NOT NULL, password_hash IS NOT NULL
                """, logger: logger)
        ).first
    }

    // MARK: - Sessions

    func startSession(idHash: Data, user: Int64, expires: Date) async throws {
        try await client.query(
            """
            WITH ended AS (DELETE FROM user_sessions WHERE expires_at < now())
            INSERT INTO user_sessions (id_hash, user_id, expires_at) VALUES (\(idHash), \(user), \(expires))
            """, logger: logger)
    }

    func sessionUser(idHash: Data, idle: TimeInterval) async throws -> User? {
        let seenAfter = Date().addingTimeInterval(-idle)
        return try await users(
            client.query(
                """
                WITH seen AS (
                    UPDATE user_sessions SET last_seen_at = now()
                    WHERE id_hash = \(idHash) AND expires_at > now() AND last_seen_at > \(seenAfter)
                    RETURNING user_id
                )
                \(unescaped: Self.columns) WHERE disabled_at IS NULL AND id = (SELECT user_id FROM seen)
                """, logger: logger)
        ).first
    }

    func endSession(idHash: Data) async throws {
        try await client.query("DELETE FROM user_sessions WHERE id_hash = \(idHash)", logger: logger)
    }

    // MARK: - Sign-in failures

    func failures(keys: [String], since: Date) async throws -> Int {
        let rows = try await client.query(
            """
            SELECT coalesce(max(n), 0)::bigint FROM (
                SELECT count(*) AS n FROM sign_in_failures WHERE key = ANY(\(keys)) AND at > \(since) GROUP BY key) f
            """, logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    func recordFailure(keys: [String], forgetBefore: Date) async throws {
        try await client.query(
            """
            WITH forgotten AS (DELETE FROM sign_in_failures WHERE at < \(forgetBefore))
            INSERT INTO sign_in_failures (key) SELECT unnest(\(keys)::text[])
            """, logger: logger)
    }
}
