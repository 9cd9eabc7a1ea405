import CrashCompression
import HTTPTypes
import Hummingbird
import NIOCore

/// How every ingest route reads its body (`/v1/reports` and the Sentry routes): the
/// `Content-Encoding` parsed once, the compressed bytes counted against `maxBodyBytes`
/// and inflated as they arrive with output capped at `maxDecompressedBytes`, so reading
/// stops at either limit whatever the body claims. One implementation for all doors: a
/// new encoding or a change of limits applies to each of them.
struct IngestBody: Sendable {
    let maxBodyBytes: Int
    let maxDecompressedBytes: Int

    /// The body's compression, or nil for identity; 415 for anything else.
    static func compression(_ value: String?) throws -> CompressionFormat? {
        let encoding = value?.trimmingWhitespace().lowercased() ?? ""
        switch encoding {
        case "", "identity": return nil
        case "gzip", "x-gzip": return .gzip
        case "deflate": return .deflate
        default:
            throw APIError.unsupportedMediaType("unsupported Content-Encoding '\(value ?? "")': use gzip, deflate or identity")
        }
    }

    /// 413 at once when `Content-Length` already says the body is over the limit.
    func checkDeclaredLength(_ headers: HTTPFields) throws {
        if let length = headers[.contentLength].flatMap(Int.init), length > maxBodyBytes {
            throw APIError.payloadTooLarge("body is \(length) bytes, over the \(maxBodyBytes)-byte limit")
        }
    }

    /// Reads the body, counting compressed bytes against `maxBodyBytes` and inflating as
    /// it arrives with output capped at `maxDecompressedBytes`: stops at either limit.
    func read(_ body: RequestBody, format: CompressionFormat?) async throws -> [UInt8] {
        var received = 0
        let tooLarge = APIError.payloadTooLarge("body is over the \(maxBodyBytes)-byte limit")
        guard let format else {
            var bytes: [UInt8] = []
            for try await chunk in body {
                received += chunk.readableBytes
                guard received <= maxBodyBytes else { throw tooLarge }
                guard received <= maxDecompressedBytes else {
                    throw APIError.payloadTooLarge("body is over the \(maxDecompressedBytes)-byte decompressed limit")
                }
                bytes.append(contentsOf: chunk.readableBytesView)
            }
            return bytes
        }
        let inflater = try Inflater(format: format, maxOutputBytes: maxDecompressedBytes)
        do {
            for try await chunk in body {
                received += chunk.readableBytes
                guard received <= maxBodyBytes else { throw tooLarge }
                try chunk.withUnsafeReadableBytes { try inflater.feed($0) }
            }
            if received == 0 { throw APIError.badRequest("body is empty: expected a compressed JSON object") }
            return try inflater.finish()
        } catch let error as CompressionError where error.isOutputLimitExceeded {
            throw APIError.payloadTooLarge("decompressed body is over the \(maxDecompressedBytes)-byte limit")
        } catch let error as CompressionError {
            throw APIError.badRequest("body is not JSON: \(error)")
        }
    }
}
