import Hummingbird
import NIOCore
import PostgresNIO

/// `/healthz`, `/readyz` and `/metrics`: what orchestrators and Prometheus poll.
struct OperationsController: Sendable {
    let database: CrashDatabase
    let metrics: ServerMetrics

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.get("/healthz") { _, _ in
            guard let reader = database.reader else { return Self.json(.ok, #"{"status":"ok"}"#) }
            // The standby's state as last polled: reads fall back to the primary while it is
            // down or lagging, so the process stays healthy either way.
            let state = reader.current
            let lag = (state.lagSeconds * 1000).rounded() / 1000
            return Self.json(
                .ok, #"{"status":"ok","readReplica":{"up":\#(state.up),"lagSeconds":\#(lag),"lagBytes":\#(state.lagBytes)}}"#)
        }
        router.get("/readyz") { _, _ in
            do {
                try await withDeadline(.seconds(2)) { try await database.ping() }
                return Self.json(.ok, #"{"status":"ready"}"#)
            } catch {
                return Self.json(.serviceUnavailable, #"{"error":"database unreachable"}"#, retryAfter: 5)
            }
        }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
        }
    }

    private static func json(_ status: HTTPResponse.Status, _ text: String, retryAfter: Int? = nil) -> Response {
        var response = Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
        if let retryAfter { response.headers[.retryAfter] = String(retryAfter) }
        return response
    }
}

extension CrashDatabase {
    /// A round trip to the database: succeeds only while it answers.
    func ping() async throws {
        try await client.query("SELECT 1", logger: logger)
    }
}
