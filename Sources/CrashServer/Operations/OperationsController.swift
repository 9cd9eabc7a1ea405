import Crypto
import Hummingbird
import NIOCore

/// `/healthz`, `/readyz` and `/metrics`: what orchestrators and Prometheus poll.
///
/// With a metrics token (`CRASHGUARD_METRICS_TOKEN`), `/metrics` answers only
/// `Authorization: Bearer <token>`; anything else is 401 and shows nothing of the server.
struct OperationsController: Sendable {
    /// The primary's liveness (``CrashDatabase/ping()``) and the standby's state as last polled.
    let database: CrashDatabase
    let metrics: ServerMetrics
    /// SHA-256 of the metrics token; nil: `/metrics` is open.
    private let metricsTokenDigest: [UInt8]?

    init(database: CrashDatabase, metrics: ServerMetrics, metricsToken: String = "") {
        self.database = database
        self.metrics = metrics
        metricsTokenDigest = metricsToken.isEmpty ? nil : Array(SHA256.hash(data: Array(metricsToken.utf8)))
    }

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
        router.get("/metrics") { request, _ in
            guard authorizesMetrics(request.headers[.authorization]) else {
                var response = Self.json(.unauthorized, #"{"error":"Authorization: a Bearer metrics token is required"}"#)
                response.headers[.wwwAuthenticate] = #"Bearer realm="metrics""#
                return response
            }
            return Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
        }
    }

    /// Whether `authorization` carries the metrics token. Compares SHA-256 digests in constant
    /// time, so the answer's timing tells nothing about the token, its length included.
    func authorizesMetrics(_ authorization: String?) -> Bool {
        guard let expected = metricsTokenDigest else { return true }
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else { return false }
        let presented = Array(SHA256.hash(data: Array(authorization.dropFirst(7).utf8)))
        var difference: UInt8 = 0
        for (a, b) in zip(presented, expected) { difference |= a ^ b }
        return difference == 0
    }

    private static func json(_ status: HTTPResponse.Status, _ text: String, retryAfter: Int? = nil) -> Response {
        JSONResponse.response(status, ByteBuffer(string: text), headers: retryAfter.map { [.retryAfter: String($0)] } ?? [:])
    }
}
