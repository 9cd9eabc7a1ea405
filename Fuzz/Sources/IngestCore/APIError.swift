/// Stand-in for the server's `APIError` (which needs Hummingbird): the same factory names,
/// `status.code` and `message`, so `IncomingBatch.swift` and `IngestDecoding.swift` compile
/// unchanged in the fuzz package.
struct APIError: Error {
    struct Status { let code: Int }
    let status: Status
    let message: String

    static func badRequest(_ message: String) -> Self { .init(status: .init(code: 400), message: message) }
    static func payloadTooLarge(_ message: String) -> Self { .init(status: .init(code: 413), message: message) }
    static func unsupportedMediaType(_ message: String) -> Self { .init(status: .init(code: 415), message: message) }
}
