import HTTPTypes
import Hummingbird
import NIOCore

/// A JSON answer whose body is already encoded: the OpenAPI document, the `{"error": "..."}`
/// bodies. Handlers that return a `Codable` value return it as `ResponseEncodable` instead.
enum JSONResponse {
    /// `Content-Type` of every JSON answer: JSON is UTF-8 (contract, "All bodies are JSON").
    static let contentType = "application/json; charset=utf-8"

    /// An answer of `status` with `body` and `headers` (plus the JSON content type).
    static func response(_ status: HTTPResponse.Status, _ body: ByteBuffer, headers: HTTPFields = [:]) -> Response {
        var fields: HTTPFields = [.contentType: contentType]
        for field in headers where field.name != .contentType { fields.append(field) }
        return Response(status: status, headers: fields, body: .init(byteBuffer: body))
    }

    /// A 200 with `body`.
    static func ok(_ body: ByteBuffer) -> Response { response(.ok, body) }

    /// The contract's error body `{"error": message}` with `status`.
    static func error(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:]) -> Response {
        response(status, APIError.body(message), headers: headers)
    }
}
