import Foundation
import NIOSSL
import PostgresNIO

/// A configuration built from a `postgres://` URL: the pool's (`PostgresClient`) and a single
/// connection's (the ingest-key listener), from the same text.
protocol PostgresURLConfiguration {
    associatedtype TLS
    init(host: String, port: Int, username: String, password: String?, database: String?, tls: TLS)
    init(unixSocketPath: String, username: String, password: String?, database: String?)
    static func tls(_ mode: PostgresURL.TLSMode) throws -> TLS
}

extension PostgresURLConfiguration {
    /// Reads `postgres://user:password@host:port/database?sslmode=disable|prefer|require`
    /// (also `postgresql://`; `host=/path` in the query selects a Unix socket).
    init(url: String) throws {
        try self.init(try PostgresURL(url))
    }

    /// The configuration for an already parsed URL.
    init(_ parsed: PostgresURL) throws {
        if let socket = parsed.socket {
            self.init(unixSocketPath: socket, username: parsed.username, password: parsed.password, database: parsed.database)
        } else {
            self.init(
                host: parsed.host, port: parsed.port, username: parsed.username, password: parsed.password,
                database: parsed.database, tls: try Self.tls(parsed.tls))
        }
    }
}

extension PostgresClient.Configuration: PostgresURLConfiguration {
    static func tls(_ mode: PostgresURL.TLSMode) -> TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(.makeClientConfiguration())
        case .require: .require(.makeClientConfiguration())
        }
    }
}

extension PostgresConnection.Configuration: PostgresURLConfiguration {
    static func tls(_ mode: PostgresURL.TLSMode) throws -> TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
    }
}

/// A `postgres://` URL taken apart: what both configurations above are built from.
struct PostgresURL {
    enum TLSMode { case disable, prefer, require }

    var host: String
    var port: Int
    /// The Unix socket file, when `host=/path` names one.
    var socket: String?
    var username: String
    var password: String?
    var database: String?
    var tls: TLSMode

    init(_ url: String) throws {
        guard let components = URLComponents(string: url),
            let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql"
        else { throw ConfigurationError("DATABASE_URL: not a postgres:// URL") }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? nil : path.removingPercentEncoding
        host = components.host ?? "127.0.0.1"
        port = components.port ?? 5432
        if let socket = query["host"], socket.hasPrefix("/") {
            self.socket = socket.hasSuffix(".s.PGSQL.\(port)") ? socket : "\(socket)/.s.PGSQL.\(port)"
        }
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "allow", "prefer": tls = .prefer
        case "require", "verify-ca", "verify-full": tls = .require
        case let other: throw ConfigurationError("DATABASE_URL: unknown sslmode '\(other)'")
        }
    }

    /// The password of `.env.example`'s placeholder: never accepted for a database elsewhere.
    static let placeholderPassword = "change-me"
    /// The shortest password accepted for a database that is not on this machine.
    static let minimumPasswordLength = 16

    /// Whether the database is on this machine: a Unix socket, or a loopback host (127.0.0.0/8,
    /// `::1`, `localhost` and names under `.localhost`). Such a database is reached by local
    /// users only, so a development cluster needs no strong password.
    var isLocal: Bool {
        if socket != nil { return true }
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { $0[0] } == 127
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, name, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }  // ::1
            // ::ffff:127.x.y.z, the IPv4-mapped form of a loopback address.
            return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
        }
        return false
    }

    /// Why this URL's password is too weak, or nil: a database that is not on this machine
    /// (``isLocal``) needs a password of at least ``minimumPasswordLength`` characters that is
    /// not ``placeholderPassword``.
    var weakPassword: String? {
        guard !isLocal else { return nil }
        let password = password ?? ""
        if password == Self.placeholderPassword {
            return "the password is the placeholder '\(Self.placeholderPassword)' of .env.example"
        }
        if password.count < Self.minimumPasswordLength {
            return password.isEmpty ? "no password is set" : "the password has fewer than \(Self.minimumPasswordLength) characters"
        }
        return nil
    }
}
