import CrashWire
import HTTPTypes
import Hummingbird
import Synchronization

/// Caps the requests handled at once (`CRASHGUARD_MAX_CONCURRENT_REQUESTS`) in two pools, so
/// that slow uploads cannot take the slots queries need (issue 13):
///
/// - **uploads**: the routes that read a request body as it arrives (``RequestPools/Kind``):
///   the client decides how long that takes (up to `CRASHGUARD_READ_TIMEOUT`), so slow senders
///   can hold these slots. They get `CRASHGUARD_INGEST_SHARE` of the limit.
/// - **others**: queries, the dashboard, webhooks, `/readyz`: the rest of the limit.
///
/// One over its pool's limit is refused at once, without its body being read: 503 with
/// `Retry-After: 1` and `{"error": ...}`, or on the Sentry routes the 429 with
/// `X-Sentry-Rate-Limits` that Sentry SDKs obey (they drop an event on a 5xx). The connection
/// guard then closes the connection (``ConnectionGuardHandler``: a response sent before its
/// request was received ends the connection), so a refused slow sender keeps no connection
/// either. A storm queues in the clients (which retry) and not in the server.
///
/// `GET /healthz` and `GET /metrics` are never refused: operators must be able to see a
/// server that is saturated. Placed first, so refusals cost no routing or database work.
struct ConcurrencyLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    let pools: RequestPools

    init(pools: RequestPools) {
        self.pools = pools
    }

    /// The pools of `configuration`, their in-flight counts sampled into `metrics`.
    init(configuration: ServerConfiguration, metrics: ServerMetrics) {
        pools = RequestPools(limit: configuration.maxConcurrentRequests, ingestShare: configuration.ingestShare)
        metrics.observeRequests(in: pools)
    }

    static var exemptPaths: Set<String> { ["/healthz", "/metrics"] }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if request.method == .get, Self.exemptPaths.contains(request.uri.path) {
            return try await next(request, context)
        }
        let kind = RequestPools.kind(method: request.method, path: request.uri.path)
        let pool = pools[kind]
        guard pool.inFlight.enter(limit: pool.limit) else {
            let refusal = APIError.unavailable(Self.message(kind, limit: pool.limit), retryAfter: 1)
            if RequestPools.isSentry(request.uri.path) { return SentryController.failure(refusal) }
            return try refusal.response(from: request, context: context)
        }
        defer { pool.inFlight.leave() }
        return try await next(request, context)
    }

    static func message(_ kind: RequestPools.Kind, limit: Int) -> String {
        switch kind {
        case .uploads: "server is at its limit of \(limit) concurrent uploads (ingest and debug files); retry later"
        case .others: "server is at its limit of \(limit) concurrent requests other than uploads; retry later"
        }
    }
}

/// The two pools of request slots and which requests take which.
struct RequestPools: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        /// `POST /v1/reports`, `POST /api/{id}/envelope/` and `/api/{id}/store/` (Sentry),
        /// `POST /v1/projects/{project}/debug-files`.
        case uploads
        /// Everything else.
        case others
    }

    struct Pool: Sendable {
        let limit: Int
        let inFlight = InFlightCounter()
    }

    let uploads: Pool
    let others: Pool

    /// `limit` slots in all: `ingestShare` of them (rounded down, at least one) for uploads,
    /// the rest (at least one) for the others.
    init(limit: Int, ingestShare: Double) {
        let total = max(2, limit)
        let share = Int((Double(total) * ingestShare).rounded(.down))
        uploads = Pool(limit: min(total - 1, max(1, share)))
        others = Pool(limit: total - uploads.limit)
    }

    subscript(kind: Kind) -> Pool {
        switch kind {
        case .uploads: uploads
        case .others: others
        }
    }

    /// The pool of a request, by method and path (before routing: the middleware runs first).
    static func kind(method: HTTPRequest.Method, path: String) -> Kind {
        guard method == .post else { return .others }
        // Nearly every upload, known without splitting the path.
        if path == WireProtocol.reportsPath { return .uploads }
        let parts = path.split(separator: "/")
        switch parts.count {
        case 2 where parts[0] == "v1" && parts[1] == "reports": return .uploads
        case 3 where isSentry(path): return .uploads
        case 4 where parts[0] == "v1" && parts[1] == "projects" && parts[3] == "debug-files": return .uploads
        default: return .others
        }
    }

    /// `/api/{id}/envelope/` or `/api/{id}/store/` (with or without the final slash).
    static func isSentry(_ path: String) -> Bool {
        let parts = path.split(separator: "/")
        return parts.count == 3 && parts[0] == "api" && (parts[2] == "envelope" || parts[2] == "store")
    }
}

/// Requests being handled in one pool (readable by tests and metrics).
final class InFlightCounter: Sendable {
    private let count = Atomic<Int>(0)

    init() {}

    /// Takes a slot unless `limit` are taken.
    func enter(limit: Int) -> Bool {
        let now = count.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        if now > limit {
            count.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            return false
        }
        return true
    }

    func leave() { count.wrappingSubtract(1, ordering: .acquiringAndReleasing) }

    /// Requests in flight now.
    var current: Int { count.load(ordering: .relaxed) }
}
