/// Why a request body was refused as a whole: the contract's status and a message for the
/// client. A struct over a private code, so cases can be added without breaking callers;
/// the server turns it into its HTTP error.
public struct IngestError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Sendable, Hashable {
        case badRequest
        case payloadTooLarge
        case unsupportedMediaType
    }

    private let code: Code
    /// What was wrong, for the client.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// 400: the body is not an acceptable batch; the message names the problem.
    public static func badRequest(_ message: String) -> Self { .init(.badRequest, message) }
    /// 413: the body is over a size limit.
    public static func payloadTooLarge(_ message: String) -> Self { .init(.payloadTooLarge, message) }
    /// 415: an unsupported `Content-Encoding`.
    public static func unsupportedMediaType(_ message: String) -> Self { .init(.unsupportedMediaType, message) }

    /// The HTTP status code: 400, 413 or 415.
    public var status: Int {
        switch code {
        case .badRequest: return 400
        case .payloadTooLarge: return 413
        case .unsupportedMediaType: return 415
        }
    }

    public var description: String { "\(status) \(message)" }
}
