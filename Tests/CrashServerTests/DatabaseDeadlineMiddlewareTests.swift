import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Reads answer 503 once the database deadline passes, instead of waiting on a pool that
/// cannot connect (after a PostgreSQL restart a lease waits for the pool's circuit breaker).
@Suite struct DatabaseDeadlineMiddlewareTests {
    func withClient(limit: Duration, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let router = Router(context: CrashRequestContext.self)
        router.add(middleware: ErrorMiddleware())
        let bounded = router.group().add(middleware: DatabaseDeadlineMiddleware(limit: limit))
        // A wait that ends only when cancelled, as a pool lease does.
        bounded.get("/waits") { _, _ -> String in
            try await Task.sleep(for: .seconds(600))
            return "never"
        }
        bounded.get("/quick") { _, _ in "ok" }
        try await Application(router: router).test(.router) { client in try await body(client) }
    }

    @Test func waitPastTheDeadlineIs503WithRetryAfter() async throws {
        try await withClient(limit: .milliseconds(300)) { client in
            let started = ContinuousClock.now
            let response = try await client.execute(uri: "/waits", method: .get)
            let waited = ContinuousClock.now - started
            #expect(response.status == .serviceUnavailable)
            #expect(response.headers[.retryAfter] == "5")
            #expect(String(buffer: response.body).contains("database unreachable"))
            // Answered at the deadline, not when the handler's ten-minute wait would end.
            #expect(waited >= .milliseconds(300))
            #expect(waited < .seconds(30))
        }
    }

    @Test func answerWithinTheDeadlinePassesThrough() async throws {
        try await withClient(limit: .seconds(30)) { client in
            let response = try await client.execute(uri: "/quick", method: .get)
            #expect(response.status == .ok)
            #expect(String(buffer: response.body) == "ok")
        }
    }
}
