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
}
