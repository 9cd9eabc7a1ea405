import CrashGrouping
import CrashWire
import Foundation

/// A request body read as `POST /v1/reports` reads it: what to store and what to list as
/// rejected. Everything the server decides about a body before the database is here.
public struct IngestBatch: Sendable {
    /// A valid report with its index in `reports` and its group signature.
    public struct Accepted: Sendable {
        public var index: Int
        /// The report, scrubbed when a scrubber was given. Without its stack (`stack` is nil)
        /// when the frames are in ``stackJSON``; with it when scrubbing changed a frame.
        public var report: Report
        public var signature: Signature
        /// The report's `stack` array as the body sent it (JSON text without the white space
        /// between tokens), for whoever stores it as JSON without writing it again. Nil when
        /// `stack` is absent or null. The reader signs the frames where they lie in the body
        /// and makes no `String` of them: `report.stack` is nil.
        public var stackJSON: [UInt8]?
        /// Whether scrubbing changed any of its fields (the contract's `"scrubbed"`).
        public var scrubbed = false
    }

    /// Elements in the body's `reports` array (1 to 1000).
    public var count: Int
    /// Valid reports, in body order.
    public var accepted: [Accepted]
    /// Rejected reports, in body order, each naming its field.
    public var rejected: [IngestResponse.Rejection]
}

/// The one pipeline from request bytes to validated, signed reports: feed the body's
/// chunks as they arrive, then ``finish(now:)``.
///
/// Chunks are counted against the compressed cap, decoded (gzip/deflate/br/zstd) with output
/// capped, and scanned as they come by ``JSONBodyScanner``, which refuses a bad body at
/// the first byte that proves it bad (the 1001st report, nesting past 32, a raw control
/// character, invalid UTF-8 or JSON), before the rest is received or inflated. A body that
/// passes is then read into reports by ``ReportReader`` and signed by `Grouping`. Memory:
/// the decoded body without the white space between its tokens (at most the decompressed
/// cap) plus the reports it yields.
public final class IngestBodyReader {
    private var body: CappedBodyReader
    private var scanner = JSONBodyScanner()
    /// The decoded body as the scanner hands it on: without the white space between tokens.
    private var bytes = GrowingBytes()
    /// Why the body is bad, once proven: the rest is only counted against the caps.
    private var refusal: IngestError?

    /// A reader for one body with the given `Content-Encoding` header and caps; 415 for an
    /// unsupported encoding.
    public convenience init(contentEncoding: String?, maxBodyBytes: Int, maxDecompressedBytes: Int) throws(IngestError) {
        try self.init(
            coding: ContentCoding(header: contentEncoding), maxBodyBytes: maxBodyBytes,
            maxDecompressedBytes: maxDecompressedBytes)
    }

    public init(coding: ContentCoding, maxBodyBytes: Int, maxDecompressedBytes: Int) throws(IngestError) {
        body = try CappedBodyReader(coding: coding, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
    }

    /// Bytes received so far, as sent.
    public var receivedBytes: Int { body.receivedBytes }
    /// Bytes decoded and kept so far (the JSON held in memory, white space between tokens
    /// left out).
    public var decodedBytes: Int { bytes.count }
    /// Bytes decoded so far, kept or not.
    public var outputBytes: Int { body.outputBytes }

    /// Takes the next chunk of the body as received.
    public func feed(_ chunk: UnsafeRawBufferPointer) throws(IngestError) {
        do {
            try body.feed(chunk) { decoded in
                guard self.refusal == nil else { return }
                do {
                    try self.scanner.scan(decoded, keeping: &self.bytes)
                } catch let error as IngestError where !JSONBodyScanner.isImmediate(error) {
                    self.refusal = error
                    self.bytes = GrowingBytes()
                }
            }
        } catch let error as IngestError {
            throw error
        } catch {
            throw .badRequest("body is not JSON: \(error)")
        }
    }

    /// Takes the next chunk of the body as received.
    public func feed(_ chunk: [UInt8]) throws(IngestError) {
        do {
            try chunk.withUnsafeBytes { try feed($0) }
        } catch {
            throw error as! IngestError  // feed throws nothing else
        }
    }

    /// Ends the body: reads, validates (against `now`), scrubs with the project's `scrubber`
    /// (data-protection.md; none when nil) and signs its reports with its grouping `version`.
    public func finish(
        now: Date = Date(), version: GroupingVersion, scrubber: ReportScrubber? = nil
    ) throws(IngestError) -> IngestBatch {
        try body.finish()
        if let refusal { throw refusal }
        guard scanner.offset > 0 else { throw .badRequest("body is empty: expected a JSON object with a \"reports\" array") }
        try scanner.finish()
        let slots: [ReportReader.Slot]
        do {
            slots = try bytes.withUnsafeBufferPointer { try ReportReader.read($0, now: now, version: version, scrubber: scrubber) }
        } catch {
            throw error as! IngestError  // read throws nothing else
        }
        var accepted: [IngestBatch.Accepted] = []
        var rejected: [IngestResponse.Rejection] = []
        accepted.reserveCapacity(slots.count)
        for (index, slot) in slots.enumerated() {
            switch slot {
            case .failure(let rejection):
                rejected.append(.init(index: index, error: rejection.message))
            case .success(let read):
                let stackJSON = read.stackText.map { bytes[$0] }
                accepted.append(
                    .init(
                        index: index, report: read.report, signature: read.signature, stackJSON: stackJSON,
                        scrubbed: read.scrubbed))
            }
        }
        bytes = GrowingBytes()
        return IngestBatch(count: slots.count, accepted: accepted, rejected: rejected)
    }

    /// Reads a whole body at once (signed with `version`, by default what new projects get).
    public static func read(
        _ body: [UInt8], contentEncoding: String?, maxBodyBytes: Int = .max,
        maxDecompressedBytes: Int = WireProtocol.defaultMaxDecompressedBytes, now: Date = Date(),
        version: GroupingVersion = .newProjectDefault
    ) throws(IngestError) -> IngestBatch {
        let reader = try IngestBodyReader(
            contentEncoding: contentEncoding, maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
        try reader.feed(body)
        return try reader.finish(now: now, version: version)
    }
}

/// The ingest pipeline's verdict on a body, without HTTP or the database: what the server
/// would answer short of storing. For tests and the fuzz targets, which drive the
/// server's own code with arbitrary bytes.
public enum IngestDecoding {
    /// What the server would answer for a body, short of storing it.
    public struct Outcome: Sendable, Equatable {
        /// 202, 400, 413 or 415.
        public var status: Int
        /// Reports that would be stored.
        public var valid: Int
        /// Reports that would be listed in `rejected`.
        public var rejected: Int
        /// The error message of a refused body.
        public var error: String?

        public init(status: Int, valid: Int, rejected: Int, error: String?) {
            self.status = status
            self.valid = valid
            self.rejected = rejected
            self.error = error
        }
    }

    /// Runs `body` (compressed per `encoding`, nil for identity) through the pipeline.
    public static func evaluate(
        _ body: [UInt8], encoding: String?, maxDecompressedBytes: Int = WireProtocol.defaultMaxDecompressedBytes,
        now: Date = Date()
    ) -> Outcome {
        do {
            let batch = try IngestBodyReader.read(
                body, contentEncoding: encoding, maxDecompressedBytes: maxDecompressedBytes, now: now)
            for rejection in batch.rejected {
                precondition(!rejection.error.isEmpty, "a rejection names its field")
            }
            for item in batch.accepted {
                precondition(item.signature.hash.utf8.count == 64, "signature is a SHA-256 hex digest")
                precondition(item.signature.title.count <= Grouping.titleLimit, "title is cut at the limit")
            }
            precondition(batch.accepted.count + batch.rejected.count == batch.count, "every report is accounted for")
            return Outcome(status: 202, valid: batch.accepted.count, rejected: batch.rejected.count, error: nil)
        } catch {
            return Outcome(status: error.status, valid: 0, rejected: 0, error: error.message)
        }
    }
}
