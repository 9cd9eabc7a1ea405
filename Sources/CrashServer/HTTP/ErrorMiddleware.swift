import Hummingbird
import Logging

/// Renders every error as the contract's `{"error": "..."}`: framework errors (unknown
/// route, wrong method) keep their status; a database that cannot be reached (a restart, a
/// dropped connection: ``isConnectionError(_:)``) is the contract's 503 with `Retry-After`,
/// whichever route met it; anything else unexpected is logged and becomes a 500 that leaks
/// nothing.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as AccountError {
            throw error
        } catch let error as QuotaExceeded {
            return try error.response(from: request, context: context)
        } catch let error as HTTPError {
            let message =
                error.body ?? (error.status == .notFound ? "no such route: \(request.method) \(request.uri.path)" : error.status.reasonPhrase)
            return JSONResponse.error(error.status, message, headers: error.headers)
        } catch let error as any HTTPResponseError {
            return JSONResponse.error(error.status, error.status.reasonPhrase)
        } catch  where isConnectionError(error) {
            context.logger.warning("database unreachable", metadata: ["error.message": "\(error)"])
            throw APIError.databaseUnreachable
        } catch {
            context.logger.error("request failed", metadata: ["error.type": "\(type(of: error))", "error.message": "\(error)"])
            return JSONResponse.error(.internalServerError, "internal server error")
        }
    }
}
