import HTTPTypes
import Hummingbird

/// Read-your-writes with a standby (docs/scaling.md): a request that wrote (a triage)
/// answers with the primary's WAL position after its commit, in the `CrashGuard-Read-After`
/// header and, for the dashboard, a one-minute cookie of the same name; a request that
/// carries either reads on the primary until the standby has replayed that position.
///
/// Without `DATABASE_READ_URL` it does nothing: every read is on the primary.
struct ReadAfterMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The header (and, lowercased with underscores, the cookie) carrying the position.
    static var headerName: HTTPField.Name { HTTPField.Name("CrashGuard-Read-After")! }
    static var cookieName: String { "crashguard_read_after" }

    let enabled: Bool

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard enabled else { return try await next(request, context) }
        // A malformed value is ignored, not refused: it only ever makes reads more careful.
        let header = request.headers[Self.headerName].flatMap { WALPosition($0) }
        let cookie = request.cookies[Self.cookieName].flatMap { WALPosition($0.value) }
        let required = [header, cookie].compactMap { $0 }.max()
        let written = WrittenPosition()
        var response = try await ReadAfter.$position.withValue(required) {
            try await ReadAfter.$written.withValue(written) { try await next(request, context) }
        }
        if let position = written.value {
            response.headers[Self.headerName] = position.description
            if !request.uri.path.hasPrefix("/v1/") {
                response.setCookie(
                    Cookie(name: Self.cookieName, value: position.description, maxAge: 60, path: "/", httpOnly: true, sameSite: .lax))
            }
        }
        return response
    }
}
