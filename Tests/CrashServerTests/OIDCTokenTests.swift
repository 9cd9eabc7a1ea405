import Foundation
import JWTKit
import Testing

@testable import CrashServer

/// ID token verification (OpenID Connect Core 3.1.3.7) with keys made here and tokens signed
/// with jwt-kit: each claim the verifier checks, refused when wrong.
@Suite struct OIDCTokenTests {
    static let issuer = "https://id.example.com/realms/main"
    static let clientID = "crashguard"
    static let nonce = "n-0S6_WzA2Mj"

    let key = ES256PrivateKey()
    let now = Date()

    /// The JWKS a provider publishes for `key` (the public half only), as the server reads it.
    func keys(kid: String = "k1") async throws -> JWTKeyCollection {
        let parameters = try #require(key.publicKey.parameters)
        let jwks = #"{"keys":[{"kty":"EC","crv":"P-256","use":"sig","kid":"\#(kid)","x":"\#(parameters.x)","y":"\#(parameters.y)"}]}"#
        return try await OIDCProvider.keyCollection(jwks: Data(jwks.utf8)).0
    }

    func claims(
        iss: String = issuer, aud: [String] = [clientID], exp: TimeInterval = 300, iat: TimeInterval = 0, nonce: String? = nonce,
        email: String? = "Ada@Example.com", verified: Bool? = true
    ) -> IDTokenClaims {
        IDTokenClaims(
            iss: iss, sub: "user-1", aud: AudienceClaim(value: aud), exp: now.addingTimeInterval(exp), iat: now.addingTimeInterval(iat),
            nonce: nonce, email: email, emailVerified: verified, name: "Ada")
    }

    func sign(_ claims: IDTokenClaims, with key: ES256PrivateKey? = nil, kid: String = "k1") async throws -> String {
        let signer = JWTKeyCollection()
        await signer.add(ecdsa: key ?? self.key, kid: JWKIdentifier(string: kid))
        return try await signer.sign(claims, kid: JWKIdentifier(string: kid))
    }

    func verify(_ token: String) async throws -> VerifiedIdentity {
        try await IDTokenVerifier(issuer: Self.issuer, clientID: Self.clientID).verify(token, nonce: Self.nonce, keys: keys(), now: now)
    }

    func refusal(_ claims: IDTokenClaims) async throws -> OIDCError? {
        do {
            _ = try await verify(try await sign(claims))
            return nil
        } catch let error as OIDCError {
            return error
        }
    }

    @Test func aGoodTokenNamesTheVerifiedEmail() async throws {
        let identity = try await verify(try await sign(claims()))
        #expect(identity == VerifiedIdentity(email: "ada@example.com", name: "Ada", subject: "user-1"))
    }

    @Test func anotherAudienceIsRefused() async throws {
        #expect(try await refusal(claims(aud: ["another-client"])) == .tokenAudience)
        // The client among others it does not know: refused too (Core 3.1.3.7, 4).
        #expect(try await refusal(claims(aud: [Self.clientID, "another-client"])) == .tokenAudience)
    }

    @Test func anotherNonceOrNoneIsRefused() async throws {
        #expect(try await refusal(claims(nonce: "replayed-from-another-sign-in")) == .tokenNonce)
        #expect(try await refusal(claims(nonce: nil)) == .tokenNonce)
    }

    @Test func anExpiredOrStaleOrFutureTokenIsRefused() async throws {
        #expect(try await refusal(claims(exp: -120, iat: -400)) == .tokenExpired)
        #expect(try await refusal(claims(exp: 3600, iat: -3000)) == .tokenExpired)
        #expect(try await refusal(claims(exp: 3900, iat: 600)) == .tokenExpired)
        // Within the clock skew allowed: accepted.
        #expect(try await refusal(claims(exp: -30, iat: -200)) == nil)
    }

    @Test func anotherIssuerIsRefused() async throws {
        #expect(try await refusal(claims(iss: "https://evil.example.com")) == .tokenIssuer)
    }

    @Test func anUnverifiedOrMissingEmailIsRefused() async throws {
        #expect(try await refusal(claims(verified: false)) == .emailNotVerified)
        #expect(try await refusal(claims(verified: nil)) == .emailNotVerified)
        #expect(try await refusal(claims(email: nil)) == .emailNotVerified)
    }

    @Test func aTokenSignedByAnotherKeyIsRefused() async throws {
        let token = try await sign(claims(), with: ES256PrivateKey())
        await #expect(throws: OIDCError.tokenSignature) { try await verify(token) }
        // Tampering with the payload after signing breaks the signature too.
        let good = try await sign(claims()).split(separator: ".").map(String.init)
        let forged = try JSONEncoder().encode(claims(email: "admin@example.com"))
        let tampered = [good[0], DashboardSessions.base64url(forged), good[2]].joined(separator: ".")
        await #expect(throws: OIDCError.tokenSignature) { try await verify(tampered) }
    }

    @Test func unsignedAndOtherAlgorithmsAreRefusedBeforeAnyKeyIsUsed() async throws {
        let payload = DashboardSessions.base64url(try JSONEncoder().encode(claims()))
        for alg in ["none", "HS256", "RS384"] {
            let header = DashboardSessions.base64url(Data(#"{"alg":"\#(alg)","kid":"k1"}"#.utf8))
            await #expect(throws: OIDCError.tokenMalformed("it is not signed with RS256 or ES256")) {
                try await verify("\(header).\(payload).")
            }
        }
        await #expect(throws: OIDCError.tokenMalformed("it is not a signed JWT")) { try await verify("not-a-token") }
    }

    @Test func emailVerifiedAsTheStringTrueOrEntrasDomainOwnerCounts() throws {
        let json = #"{"iss":"i","sub":"s","aud":"c","exp":2000000000,"iat":1999999000,"email":"a@b.c","email_verified":"true"}"#
        #expect(try JSONDecoder().decode(IDTokenClaims.self, from: Data(json.utf8)).emailVerified == true)
        let no = json.replacingOccurrences(of: #""true""#, with: #""false""#)
        #expect(try JSONDecoder().decode(IDTokenClaims.self, from: Data(no.utf8)).emailVerified == nil)
        // Entra ID: no email_verified, the domain owner's verification (xms_edov) instead.
        let entra = json.replacingOccurrences(of: #""email_verified":"true""#, with: #""xms_edov":true"#)
        #expect(try JSONDecoder().decode(IDTokenClaims.self, from: Data(entra.utf8)).emailVerified == true)
        let both = json.replacingOccurrences(of: #""email_verified":"true""#, with: #""email_verified":false,"xms_edov":true"#)
        #expect(try JSONDecoder().decode(IDTokenClaims.self, from: Data(both.utf8)).emailVerified == false)
    }

    @Test func aKeySetKeepsOnlySigningKeysOfKnownTypes() async throws {
        let parameters = try #require(key.publicKey.parameters)
        let jwks = """
            {"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"hmac"},
            {"kty":"EC","crv":"P-256","use":"enc","kid":"enc","x":"\(parameters.x)","y":"\(parameters.y)"},
            {"kty":"EC","crv":"P-256","x":"\(parameters.x)","y":"\(parameters.y)"}]}
            """
        let (_, kids) = try await OIDCProvider.keyCollection(jwks: Data(jwks.utf8))
        #expect(kids == ["unnamed-2"])
        await #expect(throws: OIDCError.providerAnswer("key set (JWKS has no RSA or EC signing key)")) {
            try await OIDCProvider.keyCollection(jwks: Data(#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}"#.utf8))
        }
    }

    @Test func theChallengeIsS256OfTheVerifier() {
        // RFC 7636, appendix B.
        #expect(
            OIDCSignIn<PostgresUserStore, PostgresOIDCLoginStore>.codeChallenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
                == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func settingsNeedAllThreeAndAGoodIssuer() throws {
        var settings = OIDCSettings()
        #expect(settings.problem == nil)
        settings.issuer = Self.issuer
        #expect(settings.problem?.contains("CRASHGUARD_OIDC_CLIENT_ID and CRASHGUARD_OIDC_CLIENT_SECRET") == true)
        settings.clientID = "c"
        settings.clientSecret = "s"
        #expect(settings.problem == nil)
        #expect(OIDCSettings.issuerProblem("http://id.example.com") != nil)
        #expect(OIDCSettings.issuerProblem("http://127.0.0.1:9400") == nil)
        #expect(OIDCSettings.issuerProblem("https://id.example.com/?x=1") != nil)
        #expect(throws: ConfigurationError.self) { try OIDCSettings.parseDomains("example.com, user@example.com") }
        #expect(try OIDCSettings.parseDomains("Example.COM, corp.example.org") == ["example.com", "corp.example.org"])
        let configuration = try ServerConfiguration(environment: [
            "CRASHGUARD_OIDC_ISSUER": Self.issuer, "CRASHGUARD_OIDC_CLIENT_ID": "c", "CRASHGUARD_OIDC_DEFAULT_ROLE": "owner",
        ])
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }
}
