import Foundation

/// A sign-in between the redirect to the provider and its callback: what the callback must
/// check (the nonce, the browser that started it) and send (the PKCE verifier).
struct PendingOIDCLogin: Sendable, Equatable {
    /// SHA-256 of the `state` parameter: the key the callback finds the login by.
    var stateHash: Data
    /// The `nonce` the ID token must carry.
    var nonce: String
    /// The PKCE `code_verifier` the token request sends.
    var codeVerifier: String
    /// SHA-256 of the random value of the browser's `cg_sso` cookie.
    var browserHash: Data
    /// After this the callback is refused.
    var expires: Date
}

/// Pending single sign-ons, kept on the server so every replica can finish one another started,
/// each usable once.
protocol OIDCLoginStore: Sendable {
    /// Stores a pending login (and forgets the expired ones).
    func begin(_ login: PendingOIDCLogin) async throws
    /// Removes and returns the unexpired login of `stateHash`: a second call for the same state
    /// finds nothing.
    func finish(stateHash: Data) async throws -> PendingOIDCLogin?
}
