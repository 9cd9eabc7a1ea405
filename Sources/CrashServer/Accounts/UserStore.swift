import Foundation

/// Users, their set-up links, their sign-in sessions and the sign-in failures the rate limit
/// counts (accounts.md). Secrets arrive here already hashed.
protocol UserStore: Sendable {
    /// Creates a user; throws ``AccountError/exists`` when the e-mail is taken (in any case).
    func createUser(email: String, name: String, admin: Bool) async throws -> User
    /// The user with this e-mail (case-insensitive), disabled or not.
    func user(email: String) async throws -> User?
    /// The user with this id.
    func user(id: Int64) async throws -> User?
    /// Every user, by e-mail.
    func users() async throws -> [User]
    /// The user and its Argon2id string, for a password sign-in.
    func credentials(email: String) async throws -> (user: User, passwordHash: String?)?
    /// Disables a user and deletes its sessions, tokens and set-up links, in one transaction.
    func disable(email: String) async throws -> User?

    /// Stores a set-up link (its hash) for `user`, valid until `expires`.
    func addSetupLink(user: Int64, tokenHash: Data, expires: Date) async throws
    /// The enabled user an unexpired set-up link belongs to.
    func setupLinkUser(tokenHash: Data) async throws -> User?
    /// Uses a set-up link once: deletes it and sets the password, when it is unexpired and its
    /// user enabled; nil (nothing changed) otherwise.
    func useSetupLink(tokenHash: Data, passwordHash: String) async throws -> User?

    /// Stores a session of `user` that ends at `expires` at the latest.
    func startSession(idHash: Data, user: Int64, expires: Date) async throws
    /// The enabled user of a session that has not ended (last seen within `idle`, before its
    /// end), marking it seen now.
    func sessionUser(idHash: Data, idle: TimeInterval) async throws -> User?
    /// Deletes a session.
    func endSession(idHash: Data) async throws

    /// The most failures recorded under any of `keys` since `since`.
    func failures(keys: [String], since: Date) async throws -> Int
    /// Records one failure under each of `keys` (and forgets those older than `forgetBefore`).
    func recordFailure(keys: [String], forgetBefore: Date) async throws
}
