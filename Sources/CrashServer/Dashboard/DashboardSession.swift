import Crypto
import Foundation
import Hummingbird

/// Signed dashboard sessions and CSRF tokens.
///
/// The session cookie is `v1.<project>.<expiry>.<nonce>.<mac>`: nothing secret in it, and
/// never the read token. The MAC (HMAC-SHA256 under the server's session secret) covers
/// the fields *and the project's current read-token hash*, which only the database knows:
/// rotating the project's keys (`crash-server project rotate`) ends every session of it.
/// A form's CSRF token is an HMAC of the session's nonce (or, on the sign-in form, of a
/// short-lived pre-session cookie's nonce), checked in constant time on every POST.
struct DashboardSessions: Sendable {
    static let cookieName = "cg_session"
    static let signInCookieName = "cg_signin"
    /// How long a session lasts after sign-in.
    static let lifetime: TimeInterval = 12 * 3600

    /// SHA-256 of the configured secret (`SymmetricKey` is not `Sendable`).
    private let key: [UInt8]
    /// `Secure` on the cookies (the public URL is https).
    let secure: Bool

    /// A decoded, verified session.
    struct Session: Sendable, Equatable {
        var project: String
        var expires: Int64
        var nonce: String
    }

    init(secret: [UInt8], secure: Bool) {
        key = Array(SHA256.hash(data: secret))
        self.secure = secure
    }

    /// A new session for `project`, bound to its read-token hash; the cookie value.
    func issue(project: String, tokenHash: Data, now: Date = Date()) -> (Session, String) {
        let session = Session(project: project, expires: Int64(now.timeIntervalSince1970 + Self.lifetime), nonce: Self.nonce())
        let fields = "v1.\(session.project).\(session.expires).\(session.nonce)"
        return (session, fields + "." + mac(fields, tokenHash))
    }

    /// The cookie's session when its MAC is valid, it has not expired, and the project
    /// named in it still has the read-token hash it was issued under (`lookup` returns the
    /// project and its current hash, or nil when there is no such project).
    func verify<Project>(
        _ cookie: String, now: Date = Date(), lookup: (String) async throws -> (Project, tokenHash: Data)?
    ) async throws -> (Session, Project)? {
        let parts = cookie.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 5, parts[0] == "v1", ProjectKeys.isValidSlug(parts[1]), let expires = Int64(parts[2]),
            Double(expires) > now.timeIntervalSince1970, parts[3].utf8.count == 22
        else { return nil }
        guard let (project, hash) = try await lookup(parts[1]) else { return nil }
        let fields = parts[0..<4].joined(separator: ".")
        guard Self.equal(mac(fields, hash), parts[4]) else { return nil }
        return (Session(project: parts[1], expires: expires, nonce: parts[3]), project)
    }

    /// The CSRF token of forms shown in `session`.
    func csrfToken(for session: Session) -> String { mac("csrf.\(session.nonce)", Data()) }

    /// The CSRF token of the sign-in form shown with the pre-session nonce `nonce`.
    func signInToken(nonce: String) -> String { mac("signin.\(nonce)", Data()) }

    /// Constant-time comparison of a submitted token with the expected one.
    static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var diff: UInt8 = 0
        for i in x.indices { diff |= x[i] ^ y[i] }
        return diff == 0
    }

    /// 128 random bits, base64url (22 characters).
    static func nonce() -> String {
        var rng = SystemRandomNumberGenerator()
        return base64url(Data((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &rng) }))
    }

    /// A fresh 256-bit secret, for a server started without `CRASHGUARD_SESSION_SECRET`.
    static func randomSecret() -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &rng) }
    }

    // MARK: - Cookies

    func sessionCookie(_ value: String) -> Cookie {
        Cookie(name: Self.cookieName, value: value, maxAge: Int(Self.lifetime), path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    func signInCookie(_ nonce: String) -> Cookie {
        Cookie(name: Self.signInCookieName, value: nonce, maxAge: 3600, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    func expired(_ name: String) -> Cookie {
        Cookie(name: name, value: "", maxAge: 0, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    private func mac(_ text: String, _ binding: Data) -> String {
        var hmac = HMAC<SHA256>(key: SymmetricKey(data: key))
        hmac.update(data: Array(text.utf8))
        hmac.update(data: [0])
        hmac.update(data: binding)
        return Self.base64url(Data(hmac.finalize()))
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
