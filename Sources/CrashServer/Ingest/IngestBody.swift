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
    /// holds (received plus decoded bytes) before and after each slice. The caller keeps
    /// `share` until the request ends: what was decoded lives on in what it stores.
    ///
    /// A body is read where it arrived, on Swift's cooperative threads, until it has decoded
    /// ``readingInPlaceBytes``; the rest of it is read on ``ReadingExecutor`` threads. Chunks
    /// are fed in slices of ``sliceBytes`` so that the switch comes in time: 16 KB of gzip can
    /// decode to 16 MiB, which took a cooperative thread for about 100 ms when fed whole.
    func read(_ body: RequestBody, into sink: some IngestBodySink, holding share: BodyByteBudget.Reservation) async throws {
        var chunks = body.makeAsyncIterator()
        var slices = ByteBuffer()
        func readSlices(upTo limit: Int) async throws {
            while sink.outputBytes <= limit {
                if slices.readableBytes == 0 {
                    guard let chunk = try await chunks.next() else { return }
                    slices = chunk
                }
                let slice = slices.readSlice(length: min(slices.readableBytes, Self.sliceBytes))!
                try share.grow(to: sink.receivedBytes + sink.decodedBytes + slice.readableBytes)
                try Self.ingestError { try slice.withUnsafeReadableBytes { try sink.feed($0) } }
                try share.grow(to: sink.receivedBytes + sink.decodedBytes)
            }
        }
        try await readSlices(upTo: Self.readingInPlaceBytes)
        guard sink.outputBytes > Self.readingInPlaceBytes else { return }
        try await withTaskExecutorPreference(ReadingExecutor.shared) { try await readSlices(upTo: .max) }
    }

    /// Bodies that decode to more than this are read on ``ReadingExecutor`` threads: batches of
    /// 100 and 1000 reports (about 0.3 and 3 MB) are read where they arrived, as before; the
    /// largest bodies (16.5 MB) and the bombs are not. (At 1 MiB, batches of 1000 moved too, and
    /// cost more server CPU per report in most of six rounds; docs/performance.md, session 13.)
    static let readingInPlaceBytes = 4 << 20

    /// How much of a received chunk is decoded at once: 1 KiB of gzip decodes to at most about
    /// 1 MiB.
    static let sliceBytes = 1024

    /// Runs `work`, which reads a body that decoded to `outputBytes`: where it is when the body
    /// is small, else on ``ReadingExecutor`` threads, so that no body holds one of Swift's
    /// cooperative threads (one per core, which `/healthz`, queries and the dashboard wait for)
    /// for long. A body of 5 million empty frames takes about 150 ms to read.
    static func reading<T>(_ outputBytes: Int, _ work: () throws -> T) async throws -> T {
        guard outputBytes > readingInPlaceBytes else { return try work() }
        return try await withTaskExecutorPreference(ReadingExecutor.shared) { try work() }
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
    /// Bytes decoded so far, kept or not.
    var outputBytes: Int { get }
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
    var outputBytes: Int { reader.outputBytes }

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
