import CrashIngest
import HTTPTypes
import Hummingbird
import NIOCore

/// How a door that needs its whole body (the Sentry routes) reads it with the same rules as
/// `/v1/reports`: `Content-Encoding` parsed by ``ContentCoding``, compressed and decoded bytes
/// capped by ``CappedBodyReader``, refusals mapped to the same 400/413/415. One decoder for all
/// doors: a new encoding or a change of limits applies to each of them.
struct IngestBody: Sendable {
    let maxBodyBytes: Int
    let maxDecompressedBytes: Int

    /// The body's coding; 415 for an unsupported one.
    static func compression(_ value: String?) throws -> ContentCoding {
        do {
            return try ContentCoding(header: value)
        } catch {
            throw APIError(ingest: error)
        }
    }

    /// 413 at once when `Content-Length` already says the body is over the limit.
    func checkDeclaredLength(_ headers: HTTPFields) throws {
        if let length = headers[.contentLength].flatMap(Int.init), length > maxBodyBytes {
            throw APIError.payloadTooLarge("body is \(length) bytes, over the \(maxBodyBytes)-byte limit")
        }
    }

    /// Reads and decodes the whole body, stopping at either limit.
    func read(_ body: RequestBody, format: ContentCoding) async throws -> [UInt8] {
        var reader: CappedBodyReader
        do {
            reader = try CappedBodyReader(coding: format, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
        } catch {
            throw APIError(ingest: error)
        }
        var bytes: [UInt8] = []
        do {
            for try await chunk in body {
                try chunk.withUnsafeReadableBytes { raw in
                    try reader.feed(raw) { bytes.append(contentsOf: $0) }
                }
            }
            try reader.finish()
        } catch let error as IngestError {
            throw APIError(ingest: error)
        }
        return bytes
    }
}
