import Foundation

/// Where and how the server sends e-mail: `CRASHGUARD_SMTP_URL` read.
///
/// `smtp://[user:password@]host[:port]` (port 587): plain at first, STARTTLS whenever the
/// server offers it; `smtps://...` (port 465): TLS from the first byte. User and password are
/// percent-decoded. A URL without credentials sends no `AUTH`.
struct SMTPServer: Sendable, Equatable {
    enum Security: Sendable, Equatable {
        /// Plain until `STARTTLS`, which is used whenever the server's `EHLO` offers it.
        case startTLS
        /// TLS from the first byte (`smtps`).
        case implicitTLS
    }

    var host: String
    var port: Int
    var security: Security
    var user: String?
    var password: String?
    /// Whether credentials may go without TLS: only to a loopback host (a relay on the same
    /// machine), ``isLoopback`` when read from a URL.
    var allowsPlainCredentials = false

    /// Reads an `smtp://` or `smtps://` URL; throws naming what is wrong (never the password).
    init(url text: String) throws(ConfigurationError) {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw ConfigurationError("not a URL; use smtp://[user:password@]host[:port] or smtps://...")
        }
        switch scheme {
        case "smtp": security = .startTLS
        case "smtps": security = .implicitTLS
        default: throw ConfigurationError("scheme '\(scheme.prefix(16))' is not smtp or smtps")
        }
        var host = components.percentEncodedHost ?? ""
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, host.removingPercentEncoding == host else { throw ConfigurationError("a host is required") }
        guard components.path.isEmpty || components.path == "/", components.query == nil, components.fragment == nil else {
            throw ConfigurationError("only scheme, credentials, host and port are taken")
        }
        self.host = host
        port = components.port ?? (security == .implicitTLS ? 465 : 587)
        guard (1...65535).contains(port) else { throw ConfigurationError("port \(port) is out of 1...65535") }
        user = components.percentEncodedUser.map { $0.removingPercentEncoding ?? $0 }
        password = components.percentEncodedPassword.map { $0.removingPercentEncoding ?? $0 }
        if user?.isEmpty == true { user = nil }
        guard password == nil || user != nil else { throw ConfigurationError("a password needs a user") }
        allowsPlainCredentials = isLoopback
    }

    /// Whether `host` is a loopback address or `localhost`.
    var isLoopback: Bool {
        let lower = host.lowercased()
        return lower == "localhost" || lower.hasPrefix("127.") || lower == "::1"
    }

    /// Whether `host` is an IP address literal (no SNI name is sent; the certificate is checked
    /// against the address).
    var hostIsAddress: Bool {
        host.contains(":") || host.split(separator: ".").count == 4 && host.allSatisfy { $0.isNumber || $0 == "." }
    }
}
