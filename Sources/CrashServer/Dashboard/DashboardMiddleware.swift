import HTTPTypes
import Hummingbird
import Logging

/// Security headers on every dashboard response, and errors as HTML pages: no session
/// redirects to sign-in, a client error shows its message, anything else a generic 500
/// (logged, never shown).
struct DashboardMiddleware: RouterMiddleware {
    typealias Context = CrashRequestContext
    let pages: DashboardPages
    let logger: Logger

    /// No scripts at all, styles only from the server, images only inline; no framing.
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as DashboardError where error.isSignInRequired {
            response = DashboardResponse.redirect("/")
        } catch is DashboardError {
            response = page(.forbidden, "Forbidden", "The form expired or came from another site. Reload the page and try again.")
        } catch let error as any HTTPResponseError {
            let message = (error as? APIError)?.message ?? "The request could not be handled."
            response = page(error.status, error.status.reasonPhrase, message)
        } catch  where isConnectionError(error) {
            logger.warning("dashboard page: database unreachable", metadata: ["error.message": "\(error)"])
            response = page(.serviceUnavailable, "Database unreachable", "The database cannot be reached right now. Try again in a moment.")
            response.headers[.retryAfter] = "5"
        } catch {
            logger.error("dashboard page failed", metadata: ["error.message": "\(error)", "http.path": "\(request.uri.path)"])
            response = page(.internalServerError, "Something went wrong", "The page could not be built. Try again in a moment.")
        }
        response.headers[Self.csp] = Self.contentSecurityPolicy
        response.headers[Self.nosniff] = "nosniff"
        response.headers[Self.referrerPolicy] = "no-referrer"
        response.headers[Self.frameOptions] = "DENY"
        if response.headers[.cacheControl] == nil { response.headers[.cacheControl] = "no-store" }
        return response
    }

    private func page(_ status: HTTPResponse.Status, _ heading: String, _ message: String) -> Response {
        let view = ErrorView(pageTitle: heading, heading: heading, message: message)
        let text = (try? pages.render(view, "error")) ?? heading
        return DashboardResponse.html(text, status: status)
    }

    static let csp = HTTPField.Name("Content-Security-Policy")!
    static let nosniff = HTTPField.Name("X-Content-Type-Options")!
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
    static let frameOptions = HTTPField.Name("X-Frame-Options")!
}
