import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import NIOCore
import NIOHTTP1

/// The provider's discovery document (OpenID Connect Discovery 1.0, 3): the fields the
/// authorization code flow needs.
struct OIDCProviderMetadata: Decodable, Sendable, Equatable {
    var issuer: String
    var authorizationEndpoint: String
    var tokenEndpoint: String
    var jwksURI: String
    var tokenEndpointAuthMethods: [String]?

    enum CodingKeys: String, CodingKey {
        case issuer
        case authorizationEndpoint = "authorization_endpoint"
        case tokenEndpoint = "token_endpoint"
        case jwksURI = "jwks_uri"
        case tokenEndpointAuthMethods = "token_endpoint_auth_methods_supported"
    }

    /// Whether the token endpoint takes the secret in the form (`client_secret_post`) rather
    /// than as HTTP Basic (`client_secret_basic`, the default when the provider says nothing).
    var postsSecret: Bool {
        guard let methods = tokenEndpointAuthMethods else { return false }
        return !methods.contains("client_secret_basic") && methods.contains("client_secret_post")
    }
}

/// The identity provider, as the server reaches it: discovery, signing keys and the token
/// endpoint, each exchange bounded in time (``timeout``, from connecting to the answer's last
/// byte) and size (``maxAnswerBytes``), so a dead or hostile provider gives an error page,
/// never a hang or a large allocation.
///
/// The discovery document and the keys are cached for an hour; an ID token signed by a key
/// the cached set lacks (the provider rotated its keys) refetches the set, at most once a
/// minute. One fetch of each runs at a time, however many sign-ins wait for it. A failed
/// refresh keeps using the copy it has.
actor OIDCProvider {
    let settings: OIDCSettings
    let logger: Logger
    /// One exchange with the provider, connection to last byte.
    let timeout: Duration
    /// The largest answer read; a larger one is refused.
    static let maxAnswerBytes = 1 << 20
    static let cacheLifetime: Duration = .seconds(3600)
    /// The least time between two fetches of the keys for a key id the set lacks.
    let keyRefreshInterval: Duration

    private let http: HTTPClient
    private var metadata: (value: OIDCProviderMetadata, at: ContinuousClock.Instant)?
    private var metadataFetch: Task<OIDCProviderMetadata, any Error>?
    private var keys: (collection: JWTKeyCollection, kids: Set<String>, at: ContinuousClock.Instant)?
    private var keysFetch: Task<(JWTKeyCollection, Set<String>), any Error>?

    init(
        settings: OIDCSettings, timeout: Duration = .seconds(10), keyRefreshInterval: Duration = .seconds(60), http: HTTPClient = .shared,
        logger: Logger
    ) {
        self.settings = settings
        self.timeout = timeout
        self.keyRefreshInterval = keyRefreshInterval
        self.http = http
        self.logger = logger
    }

    /// `<issuer>/.well-known/openid-configuration`.
    var discoveryURL: String {
        var base = settings.issuer
        while base.hasSuffix("/") { base.removeLast() }
        return base + "/.well-known/openid-configuration"
    }

    // MARK: - Discovery

    /// The discovery document, fetched when the cached one is older than an hour. Its
    /// `issuer` must be the configured one exactly, and its endpoints https when the issuer is.
    func discover() async throws(OIDCError) -> OIDCProviderMetadata {
        let now = ContinuousClock.now
        if let metadata, now - metadata.at < Self.cacheLifetime { return metadata.value }
        let task = metadataFetch ?? Task { try await self.fetchMetadata() }
        metadataFetch = task
        defer { metadataFetch = nil }
        do {
            let value = try await task.value
            metadata = (value, ContinuousClock.now)
            return value
        } catch {
            if let metadata {
                logger.warning("oidc discovery refresh failed; using the cached document", metadata: ["error.message": "\(error)"])
                return metadata.value
            }
            throw error as? OIDCError ?? .providerUnreachable
        }
    }

    private func fetchMetadata() async throws -> OIDCProviderMetadata {
        let (status, body) = try await exchange(HTTPClientRequest(url: discoveryURL))
        guard status == 200, let value = try? JSONDecoder().decode(OIDCProviderMetadata.self, from: body) else {
            logger.warning("oidc discovery answer unusable", metadata: ["http.status": "\(status)"])
            throw OIDCError.providerAnswer("discovery document")
        }
        guard value.issuer == settings.issuer else {
            logger.warning("oidc discovery names another issuer", metadata: ["oidc.issuer": "\(value.issuer)"])
            throw OIDCError.providerAnswer("discovery document (its issuer is not CRASHGUARD_OIDC_ISSUER)")
        }
        let secure = settings.issuer.lowercased().hasPrefix("https://")
        for endpoint in [value.authorizationEndpoint, value.tokenEndpoint, value.jwksURI] {
            let scheme = URLComponents(string: endpoint)?.scheme?.lowercased()
            guard scheme == "https" || (scheme == "http" && !secure) else {
                throw OIDCError.providerAnswer("discovery document (an endpoint is not https)")
            }
        }
        return value
    }

    // MARK: - Signing keys

    /// The provider's signing keys, refetched when older than an hour, or when `kid` is not
    /// among them and the last fetch is more than a minute old.
    func signingKeys(for kid: String?) async throws(OIDCError) -> JWTKeyCollection {
        let now = ContinuousClock.now
        if let keys {
            let fresh = now - keys.at < Self.cacheLifetime
            let known = kid.map { keys.kids.contains($0) } ?? true
            if fresh && (known || now - keys.at < keyRefreshInterval) { return keys.collection }
        }
        let metadata = try await discover()
        let task = keysFetch ?? Task { try await self.fetchKeys(metadata.jwksURI) }
        keysFetch = task
        defer { keysFetch = nil }
        do {
            let (collection, kids) = try await task.value
            keys = (collection, kids, ContinuousClock.now)
            return collection
        } catch {
            if let keys {
                logger.warning("oidc key refresh failed; using the cached keys", metadata: ["error.message": "\(error)"])
                return keys.collection
            }
            throw error as? OIDCError ?? .providerUnreachable
        }
    }

    private func fetchKeys(_ url: String) async throws -> (JWTKeyCollection, Set<String>) {
        let (status, body) = try await exchange(HTTPClientRequest(url: url))
        guard status == 200 else { throw OIDCError.providerAnswer("key set (JWKS)") }
        let (collection, kids) = try await Self.keyCollection(jwks: body)
        logger.debug("oidc keys fetched", metadata: ["oidc.keys": "\(kids.count)"])
        return (collection, kids)
    }

    /// The RSA and EC signing keys of a JWKS document; encryption keys and keys of other types
    /// are left out, a key without `kid` gets one of its own. Throws when none is left.
    static func keyCollection(jwks: Data) async throws(OIDCError) -> (JWTKeyCollection, Set<String>) {
        guard let object = try? JSONSerialization.jsonObject(with: jwks) as? [String: Any], let list = object["keys"] as? [Any]
        else { throw .providerAnswer("key set (JWKS)") }
        let collection = JWTKeyCollection()
        var kids: Set<String> = []
        for (index, entry) in list.enumerated() {
            guard let fields = entry as? [String: Any], let type = fields["kty"] as? String, type == "RSA" || type == "EC",
                (fields["use"] as? String ?? "sig") == "sig",
                let data = try? JSONSerialization.data(withJSONObject: fields), var jwk = try? JSONDecoder().decode(JWK.self, from: data)
            else { continue }
            if jwk.keyIdentifier == nil { jwk.keyIdentifier = JWKIdentifier(string: "unnamed-\(index)") }
            guard (try? await collection.add(jwk: jwk)) != nil, let kid = jwk.keyIdentifier?.string else { continue }
            kids.insert(kid)
        }
        guard !kids.isEmpty else { throw .providerAnswer("key set (JWKS has no RSA or EC signing key)") }
        return (collection, kids)
    }

    // MARK: - Token endpoint

    /// Exchanges an authorization code for the ID token (RFC 6749, 4.1.3, with the PKCE
    /// verifier of RFC 7636, 4.5). A refusal (a used or expired code) is
    /// ``OIDCError/providerRefused(_:)`` naming the provider's error code.
    func idToken(code: String, codeVerifier: String, redirectURI: String) async throws(OIDCError) -> String {
        let metadata = try await discover()
        var fields = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", codeVerifier),
            ("client_id", settings.clientID),
        ]
        var request = HTTPClientRequest(url: metadata.tokenEndpoint)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        if metadata.postsSecret {
            fields.append(("client_secret", settings.clientSecret))
        } else {
            // RFC 6749, 2.3.1: each part form-encoded before Basic.
            let pair = Self.formEncode(settings.clientID) + ":" + Self.formEncode(settings.clientSecret)
            request.headers.add(name: "Authorization", value: "Basic " + Data(pair.utf8).base64EncodedString())
        }
        request.body = .bytes(ByteBuffer(string: fields.map { Self.formEncode($0) + "=" + Self.formEncode($1) }.joined(separator: "&")))
        let status: Int
        let body: Data
        do { (status, body) = try await exchange(request) } catch { throw error as? OIDCError ?? .providerUnreachable }
        struct Answer: Decodable {
            var idToken: String?
            var error: String?
            enum CodingKeys: String, CodingKey {
                case idToken = "id_token"
                case error
            }
        }
        let answer = try? JSONDecoder().decode(Answer.self, from: body)
        guard status == 200 else {
            let code = answer?.error.map(Self.errorCode) ?? "HTTP \(status)"
            logger.info("oidc token request refused", metadata: ["http.status": "\(status)", "oidc.error": "\(code)"])
            throw .providerRefused(code)
        }
        guard let token = answer?.idToken else { throw .providerAnswer("token answer (no id_token)") }
        return token
    }

    /// An OAuth error code as the page may show it: its `[a-z_]` characters, at most 40.
    static func errorCode(_ text: String) -> String {
        let kept = String(text.unicodeScalars.filter { ("a"..."z").contains($0) || $0 == "_" }.prefix(40))
        return kept.isEmpty ? "error" : kept
    }

    /// `application/x-www-form-urlencoded` (unreserved characters kept, the rest %XX).
    static func formEncode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    // MARK: - Bounded HTTP

    /// Runs `operation` (the provider's part of one sign-in request, several exchanges), or
    /// throws ``OIDCError/providerUnreachable`` once `budget` has passed; the operation is
    /// cancelled then, which closes its connections.
    static func within<T: Sendable>(_ budget: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: budget)
                throw OIDCError.providerUnreachable
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    /// One request and its whole answer within ``timeout`` and ``maxAnswerBytes``.
    private func exchange(_ request: HTTPClientRequest) async throws -> (Int, Data) {
        let http = self.http
        let timeout = self.timeout
        let logger = self.logger
        do {
            return try await Self.within(timeout) {
                let response = try await http.execute(request, timeout: TimeAmount(timeout))
                let body = try await response.body.collect(upTo: Self.maxAnswerBytes)
                return (Int(response.status.code), Data(body.readableBytesView))
            }
        } catch let error as OIDCError {
            logger.warning("oidc provider did not answer in time", metadata: ["http.url": "\(request.url)"])
            throw error
        } catch is NIOTooManyBytesError {
            throw OIDCError.providerAnswer("answer (larger than 1 MiB)")
        } catch {
            logger.warning("oidc provider unreachable", metadata: ["http.url": "\(request.url)", "error.message": "\(error)"])
            throw OIDCError.providerUnreachable
        }
    }
}
