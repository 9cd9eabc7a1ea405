import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird

/// An error a client sees: the contract's status and `{"error": "..."}` body, plus
/// `Retry-After` where the contract asks for one.
///
/// A struct over a private code so new cases don't break callers; `description` carries
/// only what the client may read.
public struct APIError: HTTPResponseError, CustomStringConvertible, Sendable {
    private enum Code: Sendable {
        case badRequest
        case unauthorized
        case notFound
        case payloadTooLarge
        case unsupportedMediaType
        case tooManyRequests
        case unavailable
        case outcomeUnknown
    }

    private let code: Code
    /// What was wrong, for the client.
    public let message: String
    /// Seconds to wait before retrying (429, 503, and the 500 of ``outcomeUnknown(_:retryAfter:)``).
    public let retryAfter: Int?
    /// The 401's `WWW-Authenticate` challenge: how this door takes its credential.
    private let challenge: String?

    private init(_ code: Code, _ message: String, retryAfter: Int? = nil, challenge: String? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.challenge = challenge
    }

    /// 400: malformed request or parameter; the message names it.
    public static func badRequest(_ message: String) -> Self { .init(.badRequest, message) }
    /// 401: missing or unknown key or token; `challenge` is the `WWW-Authenticate` value, the
    /// read API's `Bearer` unless the door takes another credential.
    public static func unauthorized(_ message: String, challenge: String = "Bearer") -> Self {
        .init(.unauthorized, message, challenge: challenge)
    }
    /// 404: unknown project, group or route.
    public static func notFound(_ message: String) -> Self { .init(.notFound, message) }
    /// 413: a body over a size limit.
    public static func payloadTooLarge(_ message: String) -> Self { .init(.payloadTooLarge, message) }
    /// 415: unsupported `Content-Type` or `Content-Encoding`.
    public static func unsupportedMediaType(_ message: String) -> Self { .init(.unsupportedMediaType, message) }
    /// 429: over the project's rate limit.
    public static func tooManyRequests(_ message: String, retryAfter: Int) -> Self {
        .init(.tooManyRequests, message, retryAfter: max(1, retryAfter))
    }
    /// 503: database unreachable or ingest queue full; nothing of the request was stored.
    public static func unavailable(_ message: String, retryAfter: Int = 1) -> Self {
        .init(.unavailable, message, retryAfter: max(1, retryAfter))
    }

    /// 500: the database did not answer an ingest `COMMIT`, so the reports may or may not be
    /// stored (not 503, which promises nothing was); a retry is counted once.
    public static func outcomeUnknown(_ message: String, retryAfter: Int) -> Self {
        .init(.outcomeUnknown, message, retryAfter: max(1, retryAfter))
    }

    /// The client's error for a body the ingest pipeline refused.
    init(ingest error: IngestError) {
        switch error.status {
        case 413: self.init(.payloadTooLarge, error.message)
        case 415: self.init(.unsupportedMediaType, error.message)
        default: self.init(.badRequest, error.message)
        }
    }

    /// The HTTP status for this error.
    public var status: HTTPResponse.Status {
        switch code {
        case .badRequest: return .badRequest
        case .unauthorized: return .unauthorized
        case .notFound: return .notFound
        case .payloadTooLarge: return .contentTooLarge
        case .unsupportedMediaType: return .unsupportedMediaType
        case .tooManyRequests: return .tooManyRequests
        case .unavailable: return .serviceUnavailable
        case .outcomeUnknown: return .internalServerError
        }
    }

    public var description: String { "\(status.code) \(message)" }

    /// Renders `{"error": message}` with `Retry-After` when set.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        if let challenge { headers[.wwwAuthenticate] = challenge }
        return JSONResponse.error(status, message, headers: headers)
    }

    /// The JSON error body for `message`.
    static func body(_ message: String) -> ByteBuffer {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        let data = (try? encoder.encode(ErrorBody(error: message))) ?? Data("{\"error\":\"error\"}".utf8)
        return ByteBuffer(bytes: data)
    }
}

/// The errors several routes answer alike, said once.
extension APIError {
    /// 503: the database could not be reached (a connection failure, the batcher's view of a
    /// database that is down); nothing of the request was stored.
    static let databaseUnreachable = APIError.unavailable("database unreachable", retryAfter: 5)
    /// 503: the database answered but ran into a lock or statement timeout; nothing was stored.
    static let databaseBusy = APIError.unavailable("database busy; retry later", retryAfter: 1)
    /// 503: a read statement ran into the query timeout (SQLSTATE 57014) and was rolled back.
    static let queryTimedOut = APIError.unavailable(
        "query timeout: the query took longer than the server allows; retry later, or ask for a shorter window or a coarser interval",
        retryAfter: 5)

    /// 404: `project` has no crash group `group`.
    static func noCrashGroup(_ group: Int64, in project: ProjectRef) -> APIError {
        .notFound("no crash group \(group) in project '\(project.slug)'")
    }
}
