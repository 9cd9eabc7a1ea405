import Foundation

/// Sentry DSNs: `<scheme>://<publicKey>@<host>[:<port>][/<path>]/<projectId>`, the one
/// setting a Sentry SDK needs. A project's DSN carries its ingest key as the public key
/// and its `sentryId` as the project id.
public enum SentryDSN {
    /// What `project list` puts where the key goes: only the key's hash is stored.
    public static let keyPlaceholder = "<ingestKey>"

    /// `true` for an `http` or `https` URL with a host, without user info, query or fragment.
    public static func isValidPublicURL(_ url: String) -> Bool {
        guard let parts = URLComponents(string: url), let scheme = parts.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = parts.host, !host.isEmpty
        else { return false }
        return parts.user == nil && parts.password == nil && parts.query == nil && parts.fragment == nil
    }

    /// The DSN for `key` and `sentryID` on the server at `publicURL`. A path in the public
    /// URL (a server behind a proxy under a prefix) is kept: SDKs send to
    /// `<path>/api/<projectId>/envelope/`.
    public static func format(publicURL: String, key: String, sentryID: Int64) -> String {
        let parts = URLComponents(string: publicURL)
        let scheme = parts?.scheme?.lowercased() ?? "http"
        var host = parts?.percentEncodedHost ?? "127.0.0.1"
        if host.contains(":"), !host.hasPrefix("[") { host = "[\(host)]" }
        let port = parts?.port.map { ":\($0)" } ?? ""
        var path = parts?.percentEncodedPath ?? ""
        while path.hasSuffix("/") { path.removeLast() }
        return "\(scheme)://\(key)@\(host)\(port)\(path)/\(sentryID)"
    }

    /// The public key of a DSN (its user part), or nil when it has none.
    static func publicKey(ofDSN dsn: String) -> String? {
        guard let parts = URLComponents(string: dsn), let user = parts.user, !user.isEmpty else { return nil }
        return user
    }
}
