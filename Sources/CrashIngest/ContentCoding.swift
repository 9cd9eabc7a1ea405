import CrashCompression

/// A request body's `Content-Encoding`, as every ingest route reads it (`/v1/reports`, and
/// any other door that takes compressed bodies): the one place that maps the header to a
/// decoder.
public enum ContentCoding: Sendable, Hashable {
    case identity
    case gzip
    case deflate
    case br
    case zstd

    /// Reads the header (case-insensitive, surrounding white space ignored); absent or
    /// `identity` is ``identity``. Anything else is 415.
    public init(header value: String?) throws(IngestError) {
        let encoding = (value ?? "").trimmingASCIIWhitespace().lowercased()
        switch encoding {
        case "", "identity": self = .identity
        case "gzip", "x-gzip": self = .gzip
        case "deflate": self = .deflate
        case "br": self = .br
        case "zstd": self = .zstd
        default:
            throw .unsupportedMediaType(
                "unsupported Content-Encoding '\(value ?? "")': use gzip, deflate, br, zstd or identity")
        }
    }

    /// A fresh streaming decoder with output capped at `maxOutputBytes`; nil for identity.
    func decoder(maxOutputBytes: Int) throws -> (any StreamDecoder)? {
        switch self {
        case .identity: return nil
        case .gzip: return GzipDecoder(maxOutputBytes: maxOutputBytes)
        case .deflate: return try Inflater(format: .deflate, maxOutputBytes: maxOutputBytes)
        case .br: return try BrotliDecoder(maxOutputBytes: maxOutputBytes)
        case .zstd: return try ZstdDecoder(maxOutputBytes: maxOutputBytes)
        }
    }
}

/// A streaming decompressor: output is handed on piece by piece, capped by its creator.
protocol StreamDecoder: AnyObject {
    /// Decodes one chunk of input; throws `CompressionError` or whatever `output` throws.
    func feed(_ input: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws
    /// Ends the stream; throws `CompressionError.truncated` when it was cut short.
    func end() throws
}

extension Inflater: StreamDecoder {}

/// Reads a request body chunk by chunk with both caps of the contract: compressed bytes
/// against `maxBodyBytes`, decoded bytes against `maxDecompressedBytes` (strict "over":
/// exactly the limit passes). Decoded bytes go to the caller's `output` as they come, so
/// the reader itself holds no body; a caller that proves the body bad stops it by throwing.
///
/// Shared by every route that takes compressed bodies, so they answer the same 400/413.
public struct CappedBodyReader {
    public let coding: ContentCoding
    public let maxBodyBytes: Int
    public let maxDecompressedBytes: Int
    private let decoder: (any StreamDecoder)?
    /// Bytes received so far (compressed, as sent).
    public private(set) var receivedBytes = 0
    /// Bytes decoded so far, handed to `output` whether it kept them or not: the measure of the
    /// work a body has cost.
    public private(set) var outputBytes = 0

    public init(coding: ContentCoding, maxBodyBytes: Int, maxDecompressedBytes: Int) throws(IngestError) {
        self.coding = coding
        self.maxBodyBytes = maxBodyBytes
        self.maxDecompressedBytes = maxDecompressedBytes
        do {
            decoder = try coding.decoder(maxOutputBytes: maxDecompressedBytes)
        } catch {
            throw .badRequest("body cannot be decoded: \(error)")
        }
    }

    /// Counts and decodes one chunk as received; `output` sees the decoded bytes.
    public mutating func feed(
        _ chunk: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void
    ) throws {
        receivedBytes += chunk.count
        guard receivedBytes <= maxBodyBytes else {
            throw IngestError.payloadTooLarge("body is over the \(maxBodyBytes)-byte limit")
        }
        guard let decoder else {
            guard receivedBytes <= maxDecompressedBytes else {
                throw IngestError.payloadTooLarge("body is over the \(maxDecompressedBytes)-byte decompressed limit")
            }
            outputBytes += chunk.count
            try output(chunk.assumingMemoryBound(to: UInt8.self))
            return
        }
        var decoded = 0
        defer { outputBytes += decoded }
        do {
            try decoder.feed(chunk) { piece in
                decoded += piece.count
                try output(piece)
            }
        } catch let error as CompressionError {
            throw Self.refusal(error, limit: maxDecompressedBytes)
        }
    }

    /// Ends the body: a compressed body must be non-empty and complete.
    public func finish() throws(IngestError) {
        guard let decoder else { return }
        if receivedBytes == 0 { throw .badRequest("body is empty: expected a compressed JSON object") }
        do {
            try decoder.end()
        } catch let error as CompressionError {
            throw Self.refusal(error, limit: maxDecompressedBytes)
        } catch {
            throw .badRequest("body is not JSON: \(error)")
        }
    }

    private static func refusal(_ error: CompressionError, limit: Int) -> IngestError {
        if error.isOutputLimitExceeded {
            return .payloadTooLarge("decompressed body is over the \(limit)-byte limit")
        }
        return .badRequest("body is not JSON: \(error)")
    }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    func trimmingASCIIWhitespace() -> String {
        var utf8 = Substring(self).utf8
        while let first = utf8.first, first == 0x20 || first == 0x09 { utf8 = utf8.dropFirst() }
        while let last = utf8.last, last == 0x20 || last == 0x09 { utf8 = utf8.dropLast() }
        return String(Substring(utf8))
    }
}
