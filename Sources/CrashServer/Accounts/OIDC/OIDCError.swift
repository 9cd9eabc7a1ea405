import HTTPTypes

/// Why a single sign-on did not sign anyone in. ``message`` is the page's text: it names
/// what to do, never a token, a secret or the provider's raw answer (those are logged).
public struct OIDCError: Error, CustomStringConvertible, Sendable {
    private enum Code: Sendable {
        case notConfigured, providerUnreachable, providerAnswer, loginExpired, providerRefused
        case tokenSignature, tokenIssuer, tokenAudience, tokenExpired, tokenNonce, tokenMalformed
        case emailNotVerified, accountRefused
    }
    private let code: Code
    /// What the person signing in reads.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    static let notConfigured = OIDCError(.notConfigured, "Single sign-on is not configured on this server.")
    static let providerUnreachable = OIDCError(
        .providerUnreachable,
        "The identity provider did not answer in time. Try again in a moment; signing in with a password or a read token still works.")
    static func providerAnswer(_ what: String) -> OIDCError {
        OIDCError(.providerAnswer, "The identity provider's \(what) could not be used. Ask an admin to check the single sign-on settings.")
    }
    static let loginExpired = OIDCError(
        .loginExpired, "This sign-in link expired, was already used, or was started in another browser. Start again from the sign-in page.")
    static func providerRefused(_ error: String) -> OIDCError {
        OIDCError(.providerRefused, "The identity provider did not sign you in (\(error)). Start again from the sign-in page.")
    }
    static let tokenSignature = OIDCError(.tokenSignature, invalidToken("its signature does not verify"))
    static let tokenIssuer = OIDCError(.tokenIssuer, invalidToken("it comes from another issuer"))
    static let tokenAudience = OIDCError(.tokenAudience, invalidToken("it was issued for another client"))
    static let tokenExpired = OIDCError(.tokenExpired, invalidToken("it has expired or is not valid yet"))
    static let tokenNonce = OIDCError(.tokenNonce, invalidToken("it belongs to another sign-in"))
    static func tokenMalformed(_ what: String) -> OIDCError { OIDCError(.tokenMalformed, invalidToken(what)) }
    static let emailNotVerified = OIDCError(
        .emailNotVerified, "The identity provider did not vouch for your e-mail address (email_verified). Ask an admin.")
    static func accountRefused(_ email: String) -> OIDCError {
        OIDCError(
            .accountRefused,
            "There is no account for \(email) on this server, and its domain does not get one at first sign-in. Ask an admin to add you.")
    }
    static func accountDisabled(_ email: String) -> OIDCError {
        OIDCError(.accountRefused, "The account \(email) is disabled. Ask an admin.")
    }

    private static func invalidToken(_ why: String) -> String {
        "The identity provider's answer was refused: \(why). Start again from the sign-in page."
    }

    /// The page's status: 404 while off, 502/504 for the provider, 403 for a refused account,
    /// 400 for a sign-in that cannot be finished.
    public var status: HTTPResponse.Status {
        switch code {
        case .notConfigured: .notFound
        case .providerUnreachable: .gatewayTimeout
        case .providerAnswer: .badGateway
        case .emailNotVerified, .accountRefused: .forbidden
        case .loginExpired, .providerRefused, .tokenSignature, .tokenIssuer, .tokenAudience, .tokenExpired, .tokenNonce,
            .tokenMalformed:
            .badRequest
        }
    }

    /// A refusal of the account the provider named (none and not allowed, or disabled).
    var isAccountRefusal: Bool { code == .accountRefused }

    public var description: String { "\(status.code) \(message)" }
}

extension OIDCError: Equatable {
    public static func == (a: OIDCError, b: OIDCError) -> Bool { a.code == b.code && a.message == b.message }
}
