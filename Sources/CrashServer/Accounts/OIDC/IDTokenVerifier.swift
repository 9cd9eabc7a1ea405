import Foundation
import JWTKit

/// The claims of an ID token the server reads (OpenID Connect Core 1.0, 2 and 5.1).
struct IDTokenClaims: JWTPayload {
    var iss: String
    var sub: String
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var nonce: String?
    var email: String?
    var emailVerified: Bool?
    var name: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, iat, nonce, email, name
        case emailVerified = "email_verified"
        case domainOwnerVerified = "xms_edov"
    }

    init(
        iss: String, sub: String, aud: AudienceClaim, exp: Date, iat: Date, nonce: String?, email: String?, emailVerified: Bool?,
        name: String? = nil
    ) {
        self.iss = iss
        self.sub = sub
        self.aud = aud
        self.exp = ExpirationClaim(value: exp)
        self.iat = IssuedAtClaim(value: iat)
        self.nonce = nonce
        self.email = email
        self.emailVerified = emailVerified
        self.name = name
    }

    /// `email_verified` as a boolean, or as the strings `"true"`/`"false"` some providers send.
    /// Microsoft Entra ID sends no `email_verified`; its optional claim `xms_edov` (the e-mail's
    /// domain owner is verified) stands for it.
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        iss = try c.decode(String.self, forKey: .iss)
        sub = try c.decode(String.self, forKey: .sub)
        aud = try c.decode(AudienceClaim.self, forKey: .aud)
        exp = try c.decode(ExpirationClaim.self, forKey: .exp)
        iat = try c.decode(IssuedAtClaim.self, forKey: .iat)
        nonce = try c.decodeIfPresent(String.self, forKey: .nonce)
        email = try c.decodeIfPresent(String.self, forKey: .email)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        func flag(_ key: CodingKeys) -> Bool? {
            if let value = try? c.decodeIfPresent(Bool.self, forKey: key) { return value }
            return (try? c.decodeIfPresent(String.self, forKey: key)).flatMap { $0 == "true" ? true : nil }
        }
        emailVerified = flag(.emailVerified) ?? flag(.domainOwnerVerified)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(iss, forKey: .iss)
        try c.encode(sub, forKey: .sub)
        try c.encode(aud, forKey: .aud)
        try c.encode(exp, forKey: .exp)
        try c.encode(iat, forKey: .iat)
        try c.encodeIfPresent(nonce, forKey: .nonce)
        try c.encodeIfPresent(email, forKey: .email)
        try c.encodeIfPresent(emailVerified, forKey: .emailVerified)
        try c.encodeIfPresent(name, forKey: .name)
    }

    /// The claims are checked by ``IDTokenVerifier``, which knows the issuer, client, nonce and time.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Who an ID token says signed in.
struct VerifiedIdentity: Sendable, Equatable {
    /// The e-mail address the provider verified, lowercased.
    var email: String
    /// The `name` claim, or empty.
    var name: String
    /// The provider's subject (`sub`), for the log.
    var subject: String
}

/// Verifies an ID token (OpenID Connect Core 1.0, 3.1.3.7): an RS256 or ES256 signature by a
/// key of the provider's JWKS, the configured issuer, the client id as the only audience,
/// not expired (60 s of clock skew allowed) nor issued more than 10 minutes ago or in the
/// future, the nonce of this sign-in, and a verified e-mail address.
struct IDTokenVerifier: Sendable {
    let issuer: String
    let clientID: String

    /// Clock skew allowed between the provider and this server.
    static let leeway: TimeInterval = 60
    /// A token is used right after it is issued (the code was just exchanged); an older one is refused.
    static let maxAge: TimeInterval = 600
    /// Larger tokens are refused before any parsing.
    static let maxTokenBytes = 16 << 10
    /// The signature algorithms accepted: the two every provider offers.
    static let algorithms: Set<String> = ["RS256", "ES256"]

    /// The token's header fields the key lookup needs: the algorithm and the key id.
    struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    /// The header of `token`, after checking its shape and algorithm.
    static func header(_ token: String) throws(OIDCError) -> Header {
        guard token.utf8.count <= maxTokenBytes else { throw .tokenMalformed("it is too large") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = Data(base64URL: parts[0]), let header = try? JSONDecoder().decode(Header.self, from: data)
        else { throw .tokenMalformed("it is not a signed JWT") }
        guard algorithms.contains(header.alg) else { throw .tokenMalformed("it is not signed with RS256 or ES256") }
        return header
    }

    /// The identity `token` vouches for, or the first check it fails.
    func verify(_ token: String, nonce: String, keys: JWTKeyCollection, now: Date = Date()) async throws(OIDCError) -> VerifiedIdentity {
        _ = try Self.header(token)
        let claims: IDTokenClaims
        do {
            claims = try await keys.verify(token, as: IDTokenClaims.self)
        } catch let error as JWTError where error.errorType == .malformedToken {
            throw .tokenMalformed("its claims cannot be read")
        } catch {
            throw .tokenSignature
        }
        guard claims.iss == issuer else { throw .tokenIssuer }
        // The client must be an audience, and no one else may be (Core 3.1.3.7, 3 and 4).
        guard claims.aud.value.contains(clientID), claims.aud.value.allSatisfy({ $0 == clientID }) else { throw .tokenAudience }
        guard now.timeIntervalSince(claims.exp.value) < Self.leeway, claims.iat.value.timeIntervalSince(now) < Self.leeway,
            now.timeIntervalSince(claims.iat.value) < Self.maxAge
        else { throw .tokenExpired }
        guard let sent = claims.nonce, DashboardSessions.equal(sent, nonce) else { throw .tokenNonce }
        guard let email = claims.email?.trimmingCharacters(in: .whitespaces), !email.isEmpty, claims.emailVerified == true else {
            throw .emailNotVerified
        }
        return VerifiedIdentity(email: email.lowercased(), name: claims.name ?? "", subject: claims.sub)
    }
}

extension Data {
    /// Base64url without padding (RFC 7515, 2), as JWTs and PKCE use it.
    init?(base64URL text: some StringProtocol) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        self.init(base64Encoded: base64)
    }
}
