import Crypto
import Foundation
import Hummingbird

/// Dashboard sessions, their cookies, and CSRF tokens.
///
/// A session is a row in PostgreSQL (`dashboard_sessions`, see ``DashboardStore``) keyed by
/// the SHA-256 of a random 256-bit id; the cookie holds only that id, never the read token.
/// Every page looks the row up on the primary, so signing out (the row is deleted) or
/// rotating the project's read token (the row is bound to the token's hash, and deleted with
/// it) ends the session on every replica at once, and a copy of the old cookie opens nothing.
///
/// A form's CSRF token is an HMAC, under the server's session secret, of the session id (or,
/// on the sign-in form, of a short-lived pre-session cookie's nonce), checked in constant time
/// on every POST.
struct DashboardSessions: Sendable {
    /// How long a session lasts after sign-in.
    static let lifetime: TimeInterval = 12 * 3600

    /// SHA-256 of the configured secret (`SymmetricKey` is not `Sendable`).
    private let key: [UInt8]
    /// `Secure` cookies with the `__Host-` prefix (see ``securesCookies(publicURL:)``).
    let secure: Bool

    /// The session cookie's name: `__Host-cg_session` when ``secure``.
    let cookieName: String
    /// The sign-in form's pre-session cookie: `__Host-cg_signin` when ``secure``.
    let signInCookieName: String

    /// A session, by its id (the cookie's value).
    struct Session: Sendable, Equatable {
        var id: String

        /// What the database keeps of the id.
        var idHash: Data { ProjectKeys.hash(id) }
    }

    init(secret: [UInt8], secure: Bool) {
        key = Array(SHA256.hash(data: secret))
        self.secure = secure
        cookieName = (secure ? "__Host-" : "") + "cg_session"
        signInCookieName = (secure ? "__Host-" : "") + "cg_signin"
    }

    /// Whether cookies must be `Secure` (and so `__Host-`): always, except when the public
    /// URL is `http://` on a loopback host (`127.0.0.0/8`, `::1`, `localhost`), the one place a
    /// browser is reached over plain http without crossing a network.
    static func securesCookies(publicURL: String) -> Bool {
        guard let url = URLComponents(string: publicURL), url.scheme?.lowercased() == "http", var host = url.host?.lowercased()
        else { return true }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return false }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets[0] == "127",
            octets.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCIIDigit) && Int($0)! <= 255 })
        else { return true }
        return false
    }

    /// A new session with a random id; the caller stores it.
    func issue() -> Session { Session(id: Self.randomID()) }

    /// The session a cookie value names, when it has the shape of an id (43 base64url
    /// characters); anything else is not looked up.
    static func session(cookie value: String) -> Session? {
        let bytes = value.utf8
        guard bytes.count == 43, bytes.allSatisfy({ $0.isBase64URL }) else { return nil }
        return Session(id: value)
    }

    /// The CSRF token of forms shown in `session`.
    func csrfToken(for session: Session) -> String { mac("csrf.\(session.id)") }

    /// The CSRF token of the sign-in form shown with the pre-session nonce `nonce`.
    func signInToken(nonce: String) -> String { mac("signin.\(nonce)") }

    /// Constant-time comparison of a submitted token with the expected one.
    static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var diff: UInt8 = 0
        for i in x.indices { diff |= x[i] ^ y[i] }
        return diff == 0
    }

    /// 128 random bits, base64url (22 characters): the sign-in form's nonce.
    static func nonce() -> String { base64url(randomBytes(16)) }

    /// 256 random bits, base64url (43 characters): a session id.
    static func randomID() -> String { base64url(randomBytes(32)) }

    /// A fresh 256-bit secret, for a server started without `CRASHGUARD_SESSION_SECRET`.
    static func randomSecret() -> [UInt8] { Array(randomBytes(32)) }

    private static func randomBytes(_ count: Int) -> Data {
        var rng = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &rng) })
    }

    // MARK: - Cookies

    /// `HttpOnly; SameSite=Strict; Path=/`, and `Secure` when ``secure`` (the `__Host-` names
    /// need it, and no `Domain`, which these never have).
    func sessionCookie(_ session: Session) -> Cookie {
        Cookie(
            name: cookieName, value: session.id, maxAge: Int(Self.lifetime), path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    /// A signed-in user's session cookie: the same name and flags, kept by the browser as
    /// long as the session may last on the server.
    func userSessionCookie(_ session: Session, maxAge: TimeInterval) -> Cookie {
        Cookie(name: cookieName, value: session.id, maxAge: Int(maxAge), path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    func signInCookie(_ nonce: String) -> Cookie {
        Cookie(name: signInCookieName, value: nonce, maxAge: 3600, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    func expired(_ name: String) -> Cookie {
        Cookie(name: name, value: "", maxAge: 0, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    private func mac(_ text: String) -> String {
        var hmac = HMAC<SHA256>(key: SymmetricKey(data: key))
        hmac.update(data: Array(text.utf8))
        return Self.base64url(Data(hmac.finalize()))
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

extension UInt8 {
    fileprivate var isBase64URL: Bool {
        (self >= 65 && self <= 90) || (self >= 97 && self <= 122) || (self >= 48 && self <= 57) || self == UInt8(ascii: "-")
            || self == UInt8(ascii: "_")
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
