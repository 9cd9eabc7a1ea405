import Crypto
import Foundation
import Hummingbird
import Logging

/// Single sign-on with the authorization code flow (OpenID Connect Core 1.0, 3.1) and PKCE
/// (RFC 7636, S256): ``start()`` keeps a pending login on the server and sends the browser to
/// the provider; ``finish(state:code:browser:)`` takes it back once, exchanges the code,
/// verifies the ID token and signs the verified e-mail's user in, creating the user first
/// when the e-mail's domain is allowed.
///
/// The pending login is bound to the browser that started it by a random value in a
/// `SameSite=Lax` cookie (`Strict` cookies are not sent on the provider's redirect back), so
/// a callback URL opened elsewhere signs no one in: an attacker cannot log a victim into the
/// attacker's account.
struct OIDCSignIn<Users: UserStore, Logins: OIDCLoginStore>: Sendable {
    let settings: OIDCSettings
    let provider: OIDCProvider
    let logins: Logins
    let accounts: AccountService<Users>
    /// Where ``OIDCSettings/defaultRole`` is granted.
    let members: any MemberStore
    let audit: AuditLog
    /// `<public URL>/dashboard/sso/callback`, as registered with the provider.
    let redirectURI: String
    let logger: Logger

    /// How long a started sign-in may take at the provider.
    static var loginLifetime: TimeInterval { 600 }
    /// What the server asks the provider for.
    static var scopes: String { "openid email profile" }

    init(
        settings: OIDCSettings, provider: OIDCProvider, logins: Logins, accounts: AccountService<Users>, members: any MemberStore,
        audit: AuditLog, publicURL: String, logger: Logger
    ) {
        self.settings = settings
        self.provider = provider
        self.logins = logins
        self.accounts = accounts
        self.members = members
        self.audit = audit
        var base = publicURL
        while base.hasSuffix("/") { base.removeLast() }
        redirectURI = base + "/dashboard/sso/callback"
        self.logger = logger
    }

    /// Where to send the browser, and the value of its binding cookie.
    struct Start: Sendable {
        var location: String
        var browser: String
    }

    /// Stores a pending login with a fresh `state`, `nonce` and PKCE verifier (256 random bits
    /// each) and builds the provider's authorization URL.
    func start() async throws -> Start {
        let provider = self.provider
        let metadata = try await OIDCProvider.within(provider.timeout) { try await provider.discover() }
        let state = DashboardSessions.randomID(), nonce = DashboardSessions.randomID()
        let verifier = DashboardSessions.randomID(), browser = DashboardSessions.randomID()
        try await logins.begin(
            PendingOIDCLogin(
                stateHash: ProjectKeys.hash(state), nonce: nonce, codeVerifier: verifier, browserHash: ProjectKeys.hash(browser),
                expires: Date().addingTimeInterval(Self.loginLifetime)))
        guard var url = URLComponents(string: metadata.authorizationEndpoint) else {
            throw OIDCError.providerAnswer("discovery document (authorization_endpoint)")
        }
        url.queryItems =
            (url.queryItems ?? []) + [
                URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: settings.clientID),
                URLQueryItem(name: "redirect_uri", value: redirectURI), URLQueryItem(name: "scope", value: Self.scopes),
                URLQueryItem(name: "state", value: state), URLQueryItem(name: "nonce", value: nonce),
                URLQueryItem(name: "code_challenge", value: Self.codeChallenge(verifier)),
                URLQueryItem(name: "code_challenge_method", value: "S256"),
            ]
        // URLComponents leaves `+` as it is, which a form decoder reads as a space.
        url.percentEncodedQuery = url.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        guard let location = url.string else { throw OIDCError.providerAnswer("discovery document (authorization_endpoint)") }
        return Start(location: location, browser: browser)
    }

    /// PKCE's S256 challenge: base64url(SHA-256(verifier)) (RFC 7636, 4.2).
    static func codeChallenge(_ verifier: String) -> String { DashboardSessions.base64url(Data(SHA256.hash(data: Data(verifier.utf8)))) }

    /// Finishes the sign-in `state` names, once: the browser must hold the cookie the start
    /// set, the provider must exchange the code, and the ID token must verify. Then the user
    /// with the verified e-mail is signed in; unknown, it is created when its domain is in
    /// ``OIDCSettings/allowedDomains`` (with ``OIDCSettings/defaultRole`` on every project),
    /// else refused.
    func finish(state: String, code: String, browser: String?, address: String?) async throws -> (User, Cookie) {
        guard DashboardSessions.session(cookie: state) != nil, !code.isEmpty, code.utf8.count <= 4096,
            let login = try await logins.finish(stateHash: ProjectKeys.hash(state))
        else { throw OIDCError.loginExpired }
        guard let browser, DashboardSessions.equal(login.browserHash.base64EncodedString(), ProjectKeys.hash(browser).base64EncodedString())
        else {
            logger.info("oidc callback from another browser refused")
            throw OIDCError.loginExpired
        }
        let (provider, redirectURI) = (self.provider, self.redirectURI)
        // The provider's part, however many exchanges it takes, within one timeout.
        let (token, keys) = try await OIDCProvider.within(provider.timeout) {
            let token = try await provider.idToken(code: code, codeVerifier: login.codeVerifier, redirectURI: redirectURI)
            return (token, try await provider.signingKeys(for: IDTokenVerifier.header(token).kid))
        }
        let identity = try await IDTokenVerifier(issuer: settings.issuer, clientID: settings.clientID).verify(
            token, nonce: login.nonce, keys: keys)
        return try await signIn(identity, address: address)
    }

    /// Forgets the pending login `state` names (the provider refused the sign-in).
    func cancel(state: String) async throws {
        guard DashboardSessions.session(cookie: state) != nil else { return }
        _ = try await logins.finish(stateHash: ProjectKeys.hash(state))
    }

    /// Signs in the user `identity` names, creating it when its domain is allowed; each
    /// sign-in and refusal is in the audit log (`sso.sign-in`, `sso.sign-in-refused`).
    func signIn(_ identity: VerifiedIdentity, address: String?) async throws -> (User, Cookie) {
        let (user, cookie): (User, Cookie)
        do {
            (user, cookie) = try await userSession(identity)
        } catch let error as OIDCError {
            let actor = Principal(kind: .user, id: nil, name: identity.email)
            await audit.record("sso.sign-in-refused", by: actor, target: identity.email, address: address)
            throw error
        }
        await audit.record("sso.sign-in", by: user.principal, target: user.email, address: address)
        logger.info("oidc sign-in", metadata: ["user.id": "\(user.id)"])
        return (user, cookie)
    }

    private func userSession(_ identity: VerifiedIdentity) async throws -> (User, Cookie) {
        if let signedIn = try await accounts.signIn(verifiedEmail: identity.email) { return signedIn }
        if try await accounts.users.user(email: identity.email) != nil {
            logger.info("oidc sign-in of a disabled user refused")
            throw OIDCError.accountDisabled(identity.email)
        }
        guard let domain = identity.email.split(separator: "@").last.map(String.init), settings.allowedDomains.contains(domain) else {
            logger.info("oidc sign-in refused: no account, domain not allowed")
            throw OIDCError.accountRefused(identity.email)
        }
        let user: User
        do {
            user = try await accounts.createUser(email: identity.email, name: Self.clipped(identity.name, bytes: 200))
        } catch is AccountError {
            // Created meanwhile by another sign-in of the same person: sign that user in.
            guard let signedIn = try await accounts.signIn(verifiedEmail: identity.email) else {
                throw OIDCError.accountDisabled(identity.email)
            }
            return signedIn
        }
        if let role = ProjectRole(rawValue: settings.defaultRole) { try await members.grantOnEveryProject(user: user.id, role: role) }
        logger.info("oidc user created at first sign-in", metadata: ["user.id": "\(user.id)", "user.role": "\(settings.defaultRole)"])
        return (user, try await accounts.startSession(user))
    }

    /// `text` cut to at most `bytes` UTF-8 bytes, at a character boundary.
    static func clipped(_ text: String, bytes: Int) -> String {
        var out = ""
        for character in text {
            guard out.utf8.count + character.utf8.count <= bytes else { break }
            out.append(character)
        }
        return out
    }
}
