import Foundation

/// Single sign-on with an OpenID Connect provider (docs/accounts.md, "Single sign-on").
///
/// Off while ``issuer`` is empty; on, it needs ``clientID`` and ``clientSecret`` too.
public struct OIDCSettings: Sendable, Equatable {
    /// The provider's issuer URL exactly as its discovery document and ID tokens name it
    /// (`https://id.example.com/realms/main`); its `/.well-known/openid-configuration` is read.
    public var issuer = ""
    /// The client id registered with the provider: the ID token's audience.
    public var clientID = ""
    /// The client's secret, sent to the token endpoint only.
    public var clientSecret = ""
    /// E-mail domains whose people get an account at their first sign-in (lowercase, exact:
    /// `example.com` does not admit `sub.example.com`). Empty: only existing users sign in.
    public var allowedDomains: [String] = []
    /// The role such a new user gets on every project (`viewer`, `member`, `admin`); empty:
    /// none, an admin grants access.
    public var defaultRole = ""

    /// The defaults: off.
    public init() {}

    /// Whether single sign-on is configured.
    public var isEnabled: Bool { !issuer.isEmpty }

    /// The roles ``defaultRole`` may name.
    static let roles = ["viewer", "member", "admin"]

    /// What is wrong with the settings taken together; nil: fine (or off).
    var problem: String? {
        let set = [("CRASHGUARD_OIDC_ISSUER", issuer), ("CRASHGUARD_OIDC_CLIENT_ID", clientID), ("CRASHGUARD_OIDC_CLIENT_SECRET", clientSecret)]
        let missing = set.filter { $0.1.isEmpty }.map(\.0)
        guard missing.count < set.count else {
            return allowedDomains.isEmpty && defaultRole.isEmpty
                ? nil : "oidc: CRASHGUARD_OIDC_ALLOWED_DOMAINS and CRASHGUARD_OIDC_DEFAULT_ROLE need CRASHGUARD_OIDC_ISSUER"
        }
        guard missing.isEmpty else { return "oidc: also set \(missing.joined(separator: " and ")) (single sign-on needs all three)" }
        return nil
    }

    /// Nil when `text` is an issuer the server accepts: `https://` with a host, or `http://`
    /// on a loopback host (a provider on the same machine), without query or fragment.
    static func issuerProblem(_ text: String) -> String? {
        guard !text.isEmpty else { return nil }
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
            url.query == nil, url.fragment == nil
        else { return "'\(text)' is not an http(s) URL with a host and no query" }
        if scheme == "https" { return nil }
        if scheme == "http" && !DashboardSessions.securesCookies(publicURL: text) { return nil }
        return "'\(text)' must be https:// (http:// only on a loopback host)"
    }

    /// Lowercased, non-empty domains without `@`; throws naming the first bad one.
    static func parseDomains(_ text: String) throws(ConfigurationError) -> [String] {
        let domains = [String](settingText: text)?.map { $0.lowercased() } ?? []
        for domain in domains {
            let bad =
                domain.contains("@") || domain.hasPrefix(".") || domain.hasSuffix(".") || !domain.contains(".")
                || domain.unicodeScalars.contains { !($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == ".") }
            if bad { throw ConfigurationError("oidc allowed domains: '\(domain)' is not a domain (e.g. example.com)") }
        }
        return domains
    }
}
