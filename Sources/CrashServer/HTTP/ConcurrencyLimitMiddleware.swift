import Hummingbird
import Synchronization

/// Caps the requests handled at once (`CRASHGUARD_MAX_CONCURRENT_REQUESTS`): one over the
/// limit gets 503 with `Retry-After: 1` and `{"error": ...}` at once, without its body
/// being read, so a storm queues in the clients (which retry 503) and not in the server.
///
/// `GET /healthz` and `GET /metrics` are never refused: operators must be able to see a
/// server that is saturated. Placed first, so refusals cost no routing or database work.
struct ConcurrencyLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    let limit: Int
    let inFlight: InFlightCounter

    init(limit: Int, inFlight: InFlightCounter = InFlightCounter()) {
        self.limit = max(1, limit)
        self.inFlight = inFlight
    }

    static var exemptPaths: Set<String> { ["/healthz", "/metrics"] }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if request.method == .get, Self.exemptPaths.contains(request.uri.path) {
            return try await next(request, context)
        }
        guard inFlight.enter(limit: limit) else {
            return Response(
                status: .serviceUnavailable,
                headers: [.contentType: "application/json; charset=utf-8", .retryAfter: "1"],
                body: .init(byteBuffer: APIError.body("server is at its limit of \(limit) concurrent requests; retry later")))
        }
        defer { inFlight.leave() }
        return try await next(request, context)
    }
}

/// Requests being handled, shared by the middleware (and readable by tests and metrics).
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
