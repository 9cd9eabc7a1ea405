import HTTPTypes
import Hummingbird

/// A refusal of the accounts routes that ``APIError`` has no status for: 403 (a missing
/// scope or role) and 409 (an e-mail or a project name already taken). The body is the contract's
/// `{"error": "..."}`.
public struct AccountError: HTTPResponseError, CustomStringConvertible, Sendable {
    private enum Code: Sendable { case forbidden, exists }
    private let code: Code
    /// What was wrong, for the client.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// 403 `{"error": "missing scope <scope>"}`: a token without the route's scope.
    static func missingScope(_ scope: TokenScope) -> AccountError { .init(.forbidden, "missing scope \(scope.rawValue)") }
    /// 403: the user's role on the project does not allow the route.
    static func forbidden(_ message: String) -> AccountError { .init(.forbidden, message) }
    /// 409: a user with this e-mail exists.
    static func exists(_ email: String) -> AccountError { .init(.exists, "email: a user with this e-mail exists") }
    /// 409: what the request would create exists (`message` names the field).
    static func conflict(_ message: String) -> AccountError { .init(.exists, message) }

    public var status: HTTPResponse.Status {
        switch code {
        case .forbidden: .forbidden
        case .exists: .conflict
        }
    }

    public var description: String { "\(status.code) \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        JSONResponse.error(status, message)
    }
}
