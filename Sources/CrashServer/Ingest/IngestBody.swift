import CrashIngest
import HTTPTypes
import Hummingbird
import NIOCore

/// How every ingest door reads its body: `Content-Encoding` parsed by ``ContentCoding``,
/// compressed and decoded bytes capped by ``CappedBodyReader``, refusals mapped to the same
/// 400/413/415, and the bytes held counted against the server-wide ``BodyByteBudget`` (503
/// past it). One reader for all doors: a new encoding, a change of limits or of the budget
/// applies to each of them.
struct IngestBody: Sendable {
    let maxBodyBytes: Int
    let maxDecompressedBytes: Int
    /// Body bytes in flight across all requests of every door (received plus decoded).
    let budget: BodyByteBudget

    /// The body's coding; 415 for an unsupported one.
    static func compression(_ value: String?) throws -> ContentCoding {
        try ingestError { try ContentCoding(header: value) }
    }

    /// 413 at once when `Content-Length` already says the body is over the limit.
    func checkDeclaredLength(_ headers: HTTPFields) throws {
        if let length = headers.value(.contentLength).flatMap(Int.init), length > maxBodyBytes {
            throw APIError.payloadTooLarge("body is \(length) bytes, over the \(maxBodyBytes)-byte limit")
        }
    }

    /// Feeds the body to `sink` chunk by chunk as it arrives, growing `share` to what the sink
    /// holds (received plus decoded bytes) before and after each chunk. The caller keeps
    /// `share` until the request ends: what was decoded lives on in what it stores.
    func read(_ body: RequestBody, into sink: some IngestBodySink, holding share: BodyByteBudget.Reservation) async throws {
        for try await chunk in body {
            try share.grow(to: sink.receivedBytes + sink.decodedBytes + chunk.readableBytes)
            try Self.ingestError { try chunk.withUnsafeReadableBytes { try sink.feed($0) } }
            try share.grow(to: sink.receivedBytes + sink.decodedBytes)
        }
    }

    /// Reads and decodes the whole body (the Sentry doors), stopping at either limit.
    func read(_ body: RequestBody, format: ContentCoding, holding share: BodyByteBudget.Reservation) async throws -> [UInt8] {
        let whole = try Self.ingestError {
            try WholeBody(coding: format, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
        }
        try await read(body, into: whole, holding: share)
        try Self.ingestError { try whole.reader.finish() }
        return whole.bytes
    }

    /// Runs a step of the ingest pipeline, turning its refusal into the client's error.
    static func ingestError<T>(_ step: () throws -> T) throws -> T {
        do {
            return try step()
        } catch let error as IngestError {
            throw APIError(ingest: error)
        }
    }
}

/// What ``IngestBody/read(_:into:holding:)`` feeds: a reader that counts what it holds.
protocol IngestBodySink: AnyObject {
    /// Bytes received so far, as sent.
    var receivedBytes: Int { get }
    /// Bytes decoded and kept so far.
    var decodedBytes: Int { get }
    /// Takes the next chunk of the body as received.
    func feed(_ chunk: UnsafeRawBufferPointer) throws(IngestError)
}

extension IngestBodyReader: IngestBodySink {}

/// The decoded body, kept whole.
private final class WholeBody: IngestBodySink {
    var reader: CappedBodyReader
    private(set) var bytes: [UInt8] = []

    init(coding: ContentCoding, maxBodyBytes: Int, maxDecompressedBytes: Int) throws(IngestError) {
        reader = try CappedBodyReader(coding: coding, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
    }

    var receivedBytes: Int { reader.receivedBytes }
    var decodedBytes: Int { bytes.count }

    func feed(_ chunk: UnsafeRawBufferPointer) throws(IngestError) {
        do {
            try reader.feed(chunk) { self.bytes.append(contentsOf: $0) }
        } catch let error as IngestError {
            throw error
        } catch {
            throw .badRequest("body cannot be decoded: \(error)")
        }
    }
}
