import Foundation
import NIOSSL
import PostgresNIO

extension PostgresClient.Configuration {
    /// Reads `postgres://user:password@host:port/database?sslmode=disable|prefer|require`
    /// (also `postgresql://`; `host=/path` in the query selects a Unix socket).
    init(url: String) throws {
        guard let components = URLComponents(string: url),
            let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql"
        else { throw ConfigurationError("DATABASE_URL: not a postgres:// URL") }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        let username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        let password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let database = path.isEmpty ? nil : path.removingPercentEncoding
        if let socket = query["host"], socket.hasPrefix("/") {
            let file = socket.hasSuffix(".s.PGSQL.\(components.port ?? 5432)") ? socket : "\(socket)/.s.PGSQL.\(components.port ?? 5432)"
            self.init(unixSocketPath: file, username: username, password: password, database: database)
            return
        }
        let tls: TLS
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "allow", "prefer": tls = .prefer(.makeClientConfiguration())
        case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
        case let other: throw ConfigurationError("DATABASE_URL: unknown sslmode '\(other)'")
        }
        self.init(
            host: components.host ?? "127.0.0.1", port: components.port ?? 5432,
            username: username, password: password, database: database, tls: tls)
    }
}
