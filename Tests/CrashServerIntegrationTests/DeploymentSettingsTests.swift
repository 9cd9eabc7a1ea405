import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The deployment rules of the hardening contract that the server itself enforces: weak
/// database passwords refused off this machine, and `/metrics` behind its token.
@Suite struct DeploymentSettingsTests {
    /// The validation error of a configuration, or nil when it validates.
    func refusal(_ edit: (inout ServerConfiguration) -> Void) -> String? {
        var config = ServerConfiguration()
        edit(&config)
        do {
            try config.validate()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func aWeakPasswordOffThisMachineIsRefusedNamingTheSetting() throws {
        let weak = [
            "postgres://crashguard_app:change-me@postgres:5432/crashguard?sslmode=disable": "placeholder 'change-me'",
            "postgres://crashguard_app:fifteen-chars15@db.internal/crashguard": "fewer than 16 characters",
            "postgres://crashguard_app@10.0.0.5/crashguard": "no password",
            "postgres://crashguard_app:change-me@128.0.0.1/crashguard": "placeholder",
            "postgres://crashguard_app:short@notlocalhost/crashguard": "fewer than 16",
            "postgres://crashguard_app:short@[2001:db8::1]:5432/crashguard": "fewer than 16",
        ]
        for (url, reason) in weak {
            let message = try #require(refusal { $0.databaseURL = url }, "\(url) was accepted")
            #expect(message.hasPrefix("DATABASE_URL: "), "\(message)")
            #expect(message.contains(reason), "\(message)")
            let read = try #require(refusal { $0.databaseReadURL = url }, "\(url) was accepted as the read URL")
            #expect(read.hasPrefix("DATABASE_READ_URL: "), "\(read)")
        }
    }

    @Test func loopbackSocketsAndStrongPasswordsAreAccepted() {
        let fine = [
            "postgres://crashguard@127.0.0.1:54329/crashguard?sslmode=disable",  // the default, no password
            "postgres://crashguard:change-me@127.0.0.1:54329/crashguard",
            "postgres://crashguard:change-me@127.8.9.10/crashguard",
            "postgres://crashguard:x@localhost/crashguard",
            "postgres://crashguard:x@LocalHost./crashguard",
            "postgres://crashguard:x@db.localhost/crashguard",
            "postgres://crashguard:x@[::1]:5432/crashguard",
            "postgres://crashguard:x@[::ffff:127.0.0.1]:5432/crashguard",
            "postgres://crashguard:change-me@ignored/crashguard?host=/var/run/postgresql",
            "postgres://crashguard_app:0123456789abcdef@postgres:5432/crashguard",
            "postgresql://crashguard_app:a-long-enough-password@db.example.com/crashguard?sslmode=require",
        ]
        for url in fine {
            #expect(refusal { $0.databaseURL = url } == nil, "\(url)")
            #expect(refusal { $0.databaseReadURL = url } == nil, "\(url)")
        }
        #expect(refusal { _ in } == nil)
    }

    /// `serve` stops at once with the reason, before it tries the database.
    @Test func serveRefusesThePlaceholderPassword() throws {
        let (status, output) = try crashServer(
            ["serve", "--port", "0"],
            database: "postgres://crashguard_app:change-me@db.invalid:5432/crashguard?sslmode=disable")
        #expect(status != 0, "\(output)")
        #expect(output.contains("DATABASE_URL: the password is the placeholder 'change-me'"), "\(output)")
    }

    @Test func metricsTokenIsReadFromTheEnvironment() throws {
        #expect(ServerConfiguration().metricsToken.isEmpty)
        let config = try ServerConfiguration(environment: ["CRASHGUARD_METRICS_TOKEN": "m3trics-t0ken"])
        #expect(config.metricsToken == "m3trics-t0ken")
    }

    @Test func metricsNeedTheBearerTokenWhenOneIsSet() async throws {
        let token = "s3cret-metrics-token-0123456789"
        try await withApp(TestEnvironment.configuration { $0.metricsToken = token }) { client in
            let refused: [HTTPFields] = [
                [:],
                [.authorization: "Bearer wrong-token"],
                [.authorization: "Bearer \(token)x"],
                [.authorization: "Bearer \(token.dropLast())"],
                [.authorization: "Basic \(Data("prometheus:\(token)".utf8).base64EncodedString())"],
                [.authorization: token],
                [.authorization: "Bearer"],
            ]
            for headers in refused {
                let response = try await client.execute(uri: "/metrics", method: .get, headers: headers)
                #expect(response.status == .unauthorized, "\(headers)")
                let body = String(buffer: response.body)
                #expect(body.contains(#""error""#), "\(body)")
                #expect(!body.contains("crashguard_"), "\(body)")
            }
            for scheme in ["Bearer", "bearer"] {
                let response = try await client.execute(
                    uri: "/metrics", method: .get, headers: [.authorization: "\(scheme) \(token)"])
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains("crashguard_http_requests_total"))
            }
            // The probes stay open: orchestrators send no token.
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
        }
    }
}
