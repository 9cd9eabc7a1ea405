import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes

/// The ingest path from body bytes to grouped reports, without HTTP or the database:
/// capped inflate, ``IncomingBatch/decode(_:)``, `Report.validationError` and
/// `Grouping.signature`, as `IngestController` runs them. Public so tests can drive the
/// server's code with arbitrary bytes; the fuzz package (`Fuzz/`) compiles this file and
/// `IncomingBatch.swift` as they are, with a stand-in for `APIError`.
public enum IngestDecoding {
    /// What the server would answer for a body, short of storing it.
    public struct Outcome: Sendable, Equatable {
        /// 202, 400 or 413.
        public var status: Int
        /// Reports that would be stored.
        public var valid: Int
        /// Reports that would be listed in `rejected`.
        public var rejected: Int
        /// The error message of a 400 or 413.
        public var error: String?
    }

    /// Runs `body` (compressed per `encoding`: `gzip`, `deflate`, or nil for identity)
    /// through the server's ingest decoding with the given decompressed cap.
    public static func evaluate(
        _ body: [UInt8], encoding: String?, maxDecompressedBytes: Int = WireProtocol.defaultMaxDecompressedBytes,
        now: Date = Date()
    ) -> Outcome {
        do {
            let bytes: [UInt8]
            if let format = try format(of: encoding) {
                guard !body.isEmpty else { throw APIError.badRequest("body is empty: expected a compressed JSON object") }
                do {
                    let inflater = try Inflater(format: format, maxOutputBytes: maxDecompressedBytes)
                    try inflater.feed(body)
                    bytes = try inflater.finish()
                } catch let error as CompressionError where error.isOutputLimitExceeded {
                    throw APIError.payloadTooLarge("decompressed body is over the \(maxDecompressedBytes)-byte limit")
                } catch let error as CompressionError {
                    throw APIError.badRequest("body is not JSON: \(error)")
                }
            } else {
                guard body.count <= maxDecompressedBytes else {
                    throw APIError.payloadTooLarge("body is over the \(maxDecompressedBytes)-byte decompressed limit")
                }
                bytes = body
            }
            let batch = try IncomingBatch.decode(bytes)
            guard (1...WireProtocol.maxReportsPerBatch).contains(batch.reports.count) else {
                throw APIError.badRequest("\"reports\" has \(batch.reports.count) reports")
            }
            var valid = 0
            var rejected = 0
            for slot in batch.reports {
                switch slot.result {
                case .failure(let failure):
                    precondition(!failure.message.isEmpty, "a rejection names its field")
                    rejected += 1
                case .success(let report):
                    if let problem = report.validationError(now: now) {
                        precondition(!problem.isEmpty, "a rejection names its field")
                        rejected += 1
                        continue
                    }
                    let signature = Grouping.signature(
                        kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
                        version: .newProjectDefault)
                    precondition(signature.hash.utf8.count == 64, "signature is a SHA-256 hex digest")
                    precondition(signature.title.count <= Grouping.titleLimit, "title is cut at the limit")
                    valid += 1
                }
            }
            return Outcome(status: 202, valid: valid, rejected: rejected, error: nil)
        } catch let error as APIError {
            return Outcome(status: Int(error.status.code), valid: 0, rejected: 0, error: error.message)
        } catch {
            return Outcome(status: 500, valid: 0, rejected: 0, error: "\(error)")
        }
    }

    /// The `Content-Encoding` as the ingest route reads it: nil for identity, 415 otherwise.
    static func format(of encoding: String?) throws -> CompressionFormat? {
        switch encoding?.lowercased() ?? "" {
        case "", "identity": return nil
        case "gzip", "x-gzip": return .gzip
        case "deflate": return .deflate
        default: throw APIError.unsupportedMediaType("unsupported Content-Encoding")
        }
    }
}
