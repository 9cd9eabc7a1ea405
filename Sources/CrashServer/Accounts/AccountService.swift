import Foundation
import Hummingbird
import Logging

/// Users, passwords and sign-in sessions (accounts.md): what the command line, the
/// dashboard's sign-in page and single sign-on share.
///
/// A session is a row of `user_sessions` keyed by the SHA-256 of a random 256-bit id, which
/// the dashboard's session cookie carries: it ends after 12 hours without a request, 7 days
/// after sign-in, at sign-out, or when its user is disabled.
struct AccountService<Users: UserStore>: Sendable {
    /// A session ends after this long without a request.
    static var idle: TimeInterval { 12 * 3600 }
    /// A session ends this long after sign-in, however active.
    static var maxAge: TimeInterval { 7 * 24 * 3600 }
    /// A set-up link works once, within this long.
    static var setupLinkLifetime: TimeInterval { 24 * 3600 }
    /// Failed password sign-ins allowed per account and per client address in ``failureWindow``.
    static var failureLimit: Int { 10 }
    static var failureWindow: TimeInterval { 15 * 60 }

    let users: Users
    /// The dashboard's cookies (name, flags, CSRF key).
    let cookies: DashboardSessions
    /// The server's public URL, which set-up links start with.
    let publicURL: String
    let logger: Logger

    /// The outcome of a password sign-in.
    enum PasswordSignIn: Sendable {
        /// Signed in: set this cookie.
        case signedIn(User, Cookie)
        /// Wrong e-mail or password (the same answer for both), or a disabled user.
        case refused
        /// Too many failures for the account or the address: 429, whether the account exists or not.
        case limited
    }

    // MARK: - Users

    /// Creates a user (no password yet: it is set through ``setupLink(for:)``, or the user
    /// signs in with single sign-on). 400 for a malformed e-mail, 409 when it is taken.
    func createUser(email: String, name: String = "", admin: Bool = false) async throws -> User {
        let email = email.trimmingCharacters(in: .whitespacesAndNewlines)
        let name = name.trimmingCharacters(in: .whitespacesAndNewlines)
        if let problem = Self.emailProblem(email) { throw APIError.badRequest(problem) }
        guard name.utf8.count <= 200 else { throw APIError.badRequest("name: at most 200 bytes") }
        let user = try await users.createUser(email: email, name: name, admin: admin)
        logger.info("user created", metadata: ["user.id": "\(user.id)", "user.admin": "\(admin)"])
        return user
    }

    /// Why `email` is not an address, or nil: 3 to 320 bytes, one `@` with text on both
    /// sides, no white space or control characters.
    static func emailProblem(_ email: String) -> String? {
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard (3...320).contains(email.utf8.count), parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty,
            !email.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7f })
        else { return "email: not an e-mail address" }
        return nil
    }

    /// A new one-time set-up link for `user`, valid for 24 hours: `<public URL>/setup/<token>`.
    func setupLink(for user: User) async throws -> String {
        let token = DashboardSessions.randomID()
        try await users.addSetupLink(
            user: user.id, tokenHash: ProjectKeys.hash(token), expires: Date().addingTimeInterval(Self.setupLinkLifetime))
        var base = publicURL
        while base.hasSuffix("/") { base.removeLast() }
        return "\(base)/setup/\(token)"
    }

    /// The user a set-up link's token belongs to, while it is unused and unexpired.
    func setupUser(token: String) async throws -> User? {
        guard DashboardSessions.session(cookie: token) != nil else { return nil }
        return try await users.setupLinkUser(tokenHash: ProjectKeys.hash(token))
    }

    /// Sets the password through a set-up link, which then stops working; nil when the link
    /// is unknown, used, expired or its user disabled. 400 for a password of the wrong length.
    func setPassword(token: String, password: String) async throws -> User? {
        if let problem = PasswordHasher.problem(password) { throw APIError.badRequest(problem) }
        guard DashboardSessions.session(cookie: token) != nil else { return nil }
        let hash = try PasswordHasher.hash(password)
        return try await users.useSetupLink(tokenHash: ProjectKeys.hash(token), passwordHash: hash)
    }

    // MARK: - Sign-in

    /// Signs in a user whose e-mail an identity provider verified (single sign-on): a new
    /// session and its cookie, or nil when no enabled user has this e-mail.
    func signIn(verifiedEmail: String) async throws -> (User, Cookie)? {
        guard let user = try await users.user(email: verifiedEmail), !user.disabled else { return nil }
        return (user, try await startSession(user))
    }

    /// A new session for `user` and the cookie that carries it.
    func startSession(_ user: User) async throws -> Cookie {
        let session = cookies.issue()
        try await users.startSession(idHash: session.idHash, user: user.id, expires: Date().addingTimeInterval(Self.maxAge))
        return cookies.userSessionCookie(session, maxAge: Self.maxAge)
    }

    /// Password sign-in, limited per account and per client address: past 10 failures in 15
    /// minutes under either, every attempt is ``PasswordSignIn/limited`` before the password
    /// is looked at, whether the account exists or not. An unknown e-mail costs an Argon2id
    /// verification like a wrong password, so timing tells nothing either.
    func signIn(email: String, password: String, address: String?) async throws -> PasswordSignIn {
        let email = email.trimmingCharacters(in: .whitespacesAndNewlines)
        let keys = ["account:" + email.lowercased()] + (address.map { ["address:" + $0] } ?? [])
        let now = Date()
        guard try await users.failures(keys: keys, since: now.addingTimeInterval(-Self.failureWindow)) < Self.failureLimit else {
            return .limited
        }
        let found = email.utf8.count <= 320 ? try await users.credentials(email: email) : nil
        let acceptable = PasswordHasher.problem(password) == nil
        let matches = acceptable && PasswordHasher.verify(password, encoded: found?.passwordHash ?? PasswordHasher.decoy)
        guard let user = found?.user, matches, found?.passwordHash != nil, !user.disabled else {
            try await users.recordFailure(keys: keys, forgetBefore: now.addingTimeInterval(-Self.failureWindow))
            return .refused
        }
        return .signedIn(user, try await startSession(user))
    }

    /// The signed-in user of a session cookie's value, or nil (ended, idle too long, expired,
    /// disabled, or not a session id at all).
    func user(sessionCookie value: String) async throws -> User? {
        guard let session = DashboardSessions.session(cookie: value) else { return nil }
        return try await users.sessionUser(idHash: session.idHash, idle: Self.idle)
    }

    /// Ends the session a cookie's value names.
    func signOut(sessionCookie value: String) async throws {
        guard let session = DashboardSessions.session(cookie: value) else { return }
        try await users.endSession(idHash: session.idHash)
    }
}
