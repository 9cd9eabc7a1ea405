import Foundation
import Logging

/// The `crash-server user` commands (accounts.md, "Users"), straight on the database like the
/// `project` commands: each prints one JSON document.
public struct UserAdministration: Sendable {
    let accounts: AccountService<PostgresUserStore>
    let audit: AuditLog

    /// Commands on `database`; set-up links start with `publicURL`.
    public init(database: CrashDatabase, publicURL: String, logger: Logger) {
        accounts = AccountService(
            users: PostgresUserStore(database: database),
            cookies: DashboardSessions(secret: [], secure: DashboardSessions.securesCookies(publicURL: publicURL)),
            publicURL: publicURL, logger: logger)
        audit = AuditLog(database: database, logger: logger)
    }

    /// `user create`: `{"user": ..., "setupUrl": ...}`, the link valid for 24 hours.
    public func create(email: String, name: String, admin: Bool) async throws -> String {
        let user: User
        do {
            user = try await accounts.createUser(email: email, name: name, admin: admin)
        } catch let error as APIError {
            throw UserCommandError(description: error.message)
        } catch let error as AccountError {
            throw UserCommandError(description: error.message)
        }
        let link = try await accounts.setupLink(for: user)
        await audit.record("user.create", by: .system, target: user.email)
        return try Self.json(Created(user: user, setupUrl: link))
    }

    /// `user list`: `{"users": [...]}`.
    public func list() async throws -> String {
        try Self.json(["users": try await accounts.users.users()])
    }

    /// `user disable`: `{"user": ...}`; its sessions and tokens end at once.
    public func disable(email: String) async throws -> String {
        guard let user = try await accounts.users.disable(email: email) else {
            throw UserCommandError(description: "no user '\(email)'")
        }
        await audit.record("user.disable", by: .system, target: user.email)
        return try Self.json(["user": user])
    }

    /// `user reset-password`: a new set-up link, `{"user": ..., "setupUrl": ...}`.
    public func resetLink(email: String) async throws -> String {
        guard let user = try await accounts.users.user(email: email), !user.disabled else {
            throw UserCommandError(description: "no enabled user '\(email)'")
        }
        return try Self.json(Created(user: user, setupUrl: try await accounts.setupLink(for: user)))
    }

    private struct Created: Encodable {
        var user: User
        var setupUrl: String
    }

    private static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

/// A `user` command's refusal, printed as it is.
public struct UserCommandError: Error, CustomStringConvertible {
    public let description: String
}
