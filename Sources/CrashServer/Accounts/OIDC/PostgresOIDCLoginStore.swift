import Foundation
import Logging
import PostgresNIO

/// ``OIDCLoginStore`` in `oidc_logins`, on the primary: a login begun on one replica finishes
/// on any other, and the `DELETE ... RETURNING` that finishes it lets exactly one callback win.
struct PostgresOIDCLoginStore: OIDCLoginStore {
    let database: CrashDatabase

    private var logger: Logger { database.logger }

    func begin(_ login: PendingOIDCLogin) async throws {
        try await database.client.query(
            """
            WITH expired AS (DELETE FROM oidc_logins WHERE expires_at < now())
            INSERT INTO oidc_logins (state_hash, nonce, code_verifier, browser_hash, expires_at)
            VALUES (\(login.stateHash), \(login.nonce), \(login.codeVerifier), \(login.browserHash), \(login.expires))
            """, logger: logger)
    }

    func finish(stateHash: Data) async throws -> PendingOIDCLogin? {
        let rows = try await database.client.query(
            """
            DELETE FROM oidc_logins WHERE state_hash = \(stateHash)
            RETURNING nonce, code_verifier, browser_hash, expires_at, expires_at > now()
            """, logger: logger)
        for try await (nonce, verifier, browser, expires, live) in rows.decode((String, String, Data, Date, Bool).self) where live {
            return PendingOIDCLogin(stateHash: stateHash, nonce: nonce, codeVerifier: verifier, browserHash: browser, expires: expires)
        }
        return nil
    }
}
