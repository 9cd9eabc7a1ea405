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
    /// Once the body is read whole, the share is settled
    /// (``BodyByteBudget/Reservation/settle(holding:received:)``): requests being read may wait
    /// for its bytes to come back rather than be refused.
    func read(_ body: RequestBody, into sink: some IngestBodySink, holding share: BodyByteBudget.Reservation) async throws {
        try await read(Stream(body), into: sink, holding: share)
        share.settle(after: sink)
    }

    /// Before the body is read: the room a body of its declared `Content-Length` is expected to
    /// hold, received plus decoded, taken at once or after a wait in line
    /// (``BodyByteBudget/Reservation/admit(declaredBytes:compressed:atMost:)``); 503 when there
    /// is none in time. Nothing for a body of undeclared length.
    func admit(_ headers: HTTPFields, coding: ContentCoding, holding share: BodyByteBudget.Reservation) async throws {
        guard let declared = headers.value(.contentLength).flatMap(Int.init), declared > 0 else { return }
        // An identity body keeps at most what it received (the JSON without white space).
        let decoded = coding == .identity ? declared : maxDecompressedBytes
        try await share.admit(declaredBytes: declared, compressed: coding != .identity, atMost: declared + decoded)
    }

    /// Reads the rest of `stream` into `sink`, as ``read(_:into:holding:)``.
    private func read(_ stream: Stream, into sink: some IngestBodySink, holding share: BodyByteBudget.Reservation) async throws {
        try await stream.feed(sink, holding: share, maxBodyBytes: maxBodyBytes, sliceBytes: Self.sliceBytes) {
            sink.outputBytes <= Self.readingInPlaceBytes
        }
        guard sink.outputBytes > Self.readingInPlaceBytes else { return }
        try await withTaskExecutorPreference(ReadingExecutor.shared) {
            try await stream.feed(sink, holding: share, maxBodyBytes: maxBodyBytes, sliceBytes: Self.sliceBytes) { true }
        }
    }

    /// A body being read: the chunks still to come and what is left of the one being fed.
    /// Reading may stop (at the end of an envelope's first line) and go on later.
    final class Stream {
        private var chunks: RequestBody.AsyncIterator
        private var pending = ByteBuffer()

        init(_ body: RequestBody) {
            chunks = body.makeAsyncIterator()
        }

        /// Feeds `sink` slices of at most `sliceBytes` while `more()` holds and the body has
        /// bytes, growing `share` before each slice to what it may hold after it (received
        /// bytes, at most the body limit, plus what is decoded) and after it to what it holds.
        func feed(
            _ sink: some IngestBodySink, holding share: BodyByteBudget.Reservation, maxBodyBytes: Int, sliceBytes: Int,
            while more: () -> Bool
        ) async throws {
            while more() {
                if pending.readableBytes == 0 {
                    guard let chunk = try await chunks.next() else { return }
                    pending = chunk
                    continue
                }
                let slice = pending.readSlice(length: min(pending.readableBytes, sliceBytes))!
                // A slice past the body limit is refused by the reader (413), not by the budget.
                try await share.growWaiting(to: min(sink.receivedBytes + slice.readableBytes, maxBodyBytes) + sink.decodedBytes)
                try IngestBody.ingestError { try slice.withUnsafeReadableBytes { try sink.feed($0) } }
                try await share.growWaiting(to: sink.receivedBytes + sink.decodedBytes)
            }
        }
    }

    /// Bodies that decode to more than this are read on ``ReadingExecutor`` threads: batches of
    /// 100 and 1000 reports (about 0.3 and 3 MB) are read where they arrived, as before; the
    /// largest bodies (16.5 MB) and the bombs are not. (At 1 MiB, batches of 1000 moved too, and
    /// cost more server CPU per report in most of six rounds; docs/performance.md.)
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
        let whole = try wholeBody(body, format: format)
        return try await readRest(whole, holding: share)
    }

    /// Reads and decodes a whole request body under its `Content-Encoding` (the Apple and
    /// session doors): the declared length is checked first, and the bytes are held in a share
    /// of the body budget that the caller keeps until the request ends (what is built from the
    /// body is no larger than it).
    func readWhole(_ request: Request, project: Int64) async throws -> (bytes: [UInt8], share: BodyByteBudget.Reservation) {
        let coding = try Self.compression(request.headers.value(.contentEncoding))
        try checkDeclaredLength(request.headers)
        let share = BodyByteBudget.Reservation(budget, project: project)
        try await admit(request.headers, coding: coding, holding: share)
        return (try await read(request.body, format: coding, holding: share), share)
    }

    /// A body to be read whole, in steps: ``readFirstLine(_:maxBytes:holding:)``, then
    /// ``readRest(_:holding:)``.
    func wholeBody(_ body: RequestBody, format: ContentCoding) throws -> WholeBodyReading {
        let sink = try Self.ingestError {
            try WholeBody(coding: format, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
        }
        return WholeBodyReading(stream: Stream(body), sink: sink)
    }

    /// Reads (and decodes) no further than needed to see the first line of the body: its
    /// bytes without the newline, or nil when the first `maxBytes` decoded bytes hold no
    /// newline (the rest is not read). A body that ends without a newline is one line.
    ///
    /// While looking for the newline the reader takes slices of ``firstLineSliceBytes``, so that
    /// a compressed body decodes no more than about `maxBytes` plus one slice's worth.
    func readFirstLine(
        _ whole: WholeBodyReading, maxBytes: Int, holding share: BodyByteBudget.Reservation
    ) async throws
        -> ArraySlice<UInt8>?
    {
        let sink = whole.sink
        var scanned = 0
        func lineEnd() -> Int? {
            let bytes = sink.bytes
            if let end = bytes[scanned...].firstIndex(of: UInt8(ascii: "\n")) { return end }
            scanned = bytes.count
            return nil
        }
        try await whole.stream.feed(sink, holding: share, maxBodyBytes: maxBodyBytes, sliceBytes: Self.firstLineSliceBytes) {
            lineEnd() == nil && sink.bytes.count <= maxBytes
        }
        let end = lineEnd() ?? sink.bytes.count
        guard end <= maxBytes else { return nil }
        return sink.bytes[0..<end]
    }

    /// Reads the rest of the body and ends it: all its decoded bytes, the first line included.
    /// The share is settled, as ``read(_:into:holding:)`` settles it.
    func readRest(_ whole: WholeBodyReading, holding share: BodyByteBudget.Reservation) async throws -> [UInt8] {
        try await read(whole.stream, into: whole.sink, holding: share)
        // After `finish()`: its final flush may still decode bytes.
        try Self.ingestError { try whole.sink.reader.finish() }
        share.settle(after: whole.sink)
        return whole.sink.bytes
    }

    /// Compressed bytes fed at once while looking for a first line: 64 bytes of deflate decode
    /// to at most about 66 KB.
    static let firstLineSliceBytes = 64

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

extension BodyByteBudget.Reservation {
    /// Settles the share at what `sink` holds, its body read whole
    /// (``settle(holding:received:)``): received plus decoded bytes.
    fileprivate func settle(after sink: some IngestBodySink) {
        settle(holding: sink.receivedBytes + sink.decodedBytes, received: sink.receivedBytes)
    }
}

/// A body being read whole: see ``IngestBody/wholeBody(_:format:)``.
struct WholeBodyReading {
    fileprivate let stream: IngestBody.Stream
    fileprivate let sink: WholeBody
}

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
