import Hummingbird

/// Bounds how long a read or triage request may wait on the database: past `limit` the
/// handler is cancelled and the answer is the contract's 503 "database unreachable" with
/// `Retry-After` (``ErrorMiddleware`` maps ``DeadlineExceeded``).
///
/// After a PostgreSQL restart a lease from the pool waits for a connection until the pool's
/// circuit breaker opens (about a minute), and such a request held a SIGTERM for 20 s. A lease
/// ends on cancellation, so the handler returns at the deadline; a query already running on a
/// connection that answers is not cancelled by the driver, and the answer waits for it.
/// Ingest has its own deadlines (``IngestBatcher``) and debug-file uploads stream for as long
/// as the client sends, so neither goes through this.
struct DatabaseDeadlineMiddleware<Context: RequestContext>: RouterMiddleware {
    let limit: Duration

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await withoutActuallyEscaping(next) { next in
            // The task group waits for both children before it returns, so `next` never
            // outlives this call.
            nonisolated(unsafe) let next = next
            return try await withThrowingTaskGroup(of: Response.self) { group in
                group.addTask { try await next(request, context) }
                group.addTask {
                    try await Task.sleep(for: limit)
                    throw DeadlineExceeded()
                }
                defer { group.cancelAll() }
                guard let response = try await group.next() else { throw DeadlineExceeded() }
                return response
            }
        }
    }
}
