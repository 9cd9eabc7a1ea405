import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import Logging
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The provider client against a live fake provider (discovery and a JWKS it can rotate):
/// keys cached, refetched for a key id the set lacks at most once per interval, and an answer
/// over the size bound refused.
@Suite struct OIDCProviderTests {
    /// What the fake provider serves, and how often its keys were fetched.
    final class FakeProvider: Sendable {
        let jwks = Mutex("")
        let fetches = Mutex(0)
        /// Where the discovery document's `jwks_uri` points: `jwks`, or `big` (2 MiB).
        let jwksPath = Mutex("jwks")

        static func jwks(_ keys: [(String, ES256PrivateKey)]) -> String {
            let entries = keys.map { kid, key in
                let p = key.publicKey.parameters!
                return #"{"kty":"EC","crv":"P-256","use":"sig","kid":"\#(kid)","x":"\#(p.x)","y":"\#(p.y)"}"#
            }
            return #"{"keys":[\#(entries.joined(separator: ","))]}"#
        }

        func application() -> some ApplicationProtocol {
            let router = Router()
            router.get(".well-known/openid-configuration") { request, _ -> Response in
                let base = "http://\(request.head.authority ?? "")"
                let json = """
                    {"issuer":"\(base)","authorization_endpoint":"\(base)/authorize","token_endpoint":"\(base)/token",
                    "jwks_uri":"\(base)/\(self.jwksPath.withLock { $0 })"}
                    """
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: json)))
            }
            router.get("jwks") { _, _ -> Response in
                self.fetches.withLock { $0 += 1 }
                let text = self.jwks.withLock { $0 }
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
            }
            router.get("big") { _, _ -> Response in
                Response(status: .ok, body: .init(byteBuffer: ByteBuffer(repeating: UInt8(ascii: " "), count: 2 << 20)))
            }
            return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        }
    }

    static func settings(port: Int) -> OIDCSettings {
        var settings = OIDCSettings()
        settings.issuer = "http://127.0.0.1:\(port)"
        settings.clientID = "crashguard"
        settings.clientSecret = "secret"
        return settings
    }

    @Test func keysAreCachedAndRefetchedForAnUnknownKeyAtMostOncePerInterval() async throws {
        let fake = FakeProvider()
        let (k1, k2) = (ES256PrivateKey(), ES256PrivateKey())
        fake.jwks.withLock { $0 = FakeProvider.jwks([("k1", k1)]) }
        try await fake.application().test(.live) { client in
            let settings = Self.settings(port: try #require(client.port))
            let provider = OIDCProvider(settings: settings, keyRefreshInterval: .zero, logger: TestEnvironment.logger)
            _ = try await provider.signingKeys(for: "k1")
            _ = try await provider.signingKeys(for: "k1")
            #expect(fake.fetches.withLock { $0 } == 1, "a known key id is served from the cache")

            // The provider rotates to k2: a token naming k2 refetches the set, and verifies.
            fake.jwks.withLock { $0 = FakeProvider.jwks([("k2", k2)]) }
            let keys = try await provider.signingKeys(for: "k2")
            #expect(fake.fetches.withLock { $0 } == 2)
            let signer = JWTKeyCollection()
            await signer.add(ecdsa: k2, kid: "k2")
            let claims = IDTokenClaims(
                iss: settings.issuer, sub: "s", aud: "crashguard", exp: Date().addingTimeInterval(60), iat: Date(), nonce: "n",
                email: "a@example.com", emailVerified: true)
            let token = try await signer.sign(claims, kid: "k2")
            let identity = try await IDTokenVerifier(issuer: settings.issuer, clientID: "crashguard").verify(token, nonce: "n", keys: keys)
            #expect(identity.email == "a@example.com")

            // Within the interval, unknown key ids do not refetch: a flood of made-up ids costs one fetch.
            let slow = OIDCProvider(settings: settings, keyRefreshInterval: .seconds(3600), logger: TestEnvironment.logger)
            _ = try await slow.signingKeys(for: "k2")
            for i in 0..<5 { _ = try await slow.signingKeys(for: "made-up-\(i)") }
            #expect(fake.fetches.withLock { $0 } == 3)
        }
    }

    @Test func anAnswerOverTheBoundIsRefused() async throws {
        let fake = FakeProvider()
        fake.jwksPath.withLock { $0 = "big" }
        try await fake.application().test(.live) { client in
            let provider = OIDCProvider(settings: Self.settings(port: try #require(client.port)), logger: TestEnvironment.logger)
            #expect(try await provider.discover().jwksURI.hasSuffix("/big"))
            await #expect(throws: OIDCError.providerAnswer("answer (larger than 1 MiB)")) { try await provider.signingKeys(for: nil) }
        }
    }
}
