import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// `POST /v1/reports`: authenticate, rate-limit, read and inflate with caps, validate,
/// group, and wait for the group commit before answering 202.
struct IngestController: Sendable {
    let database: CrashDatabase
    let batcher: IngestBatcher
    let limiter: RateLimiter
    let metrics: ServerMetrics
    let maxBodyBytes: Int
    let maxDecompressedBytes: Int
    let databaseTimeout: Duration

    static let keyHeader = HTTPField.Name(WireProtocol.ingestKeyHeader)!

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.post(RouterPath(WireProtocol.reportsPath), use: ingest)
    }

    @Sendable func ingest(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let key = request.headers[Self.keyHeader], !key.isEmpty else {
            throw APIError.unauthorized("missing \(WireProtocol.ingestKeyHeader) header")
        }
        try Self.checkContentType(request.headers[.contentType])
        let format = try Self.compression(request.headers[.contentEncoding])
        if batcher.isDatabaseDown { throw APIError.unavailable("database unreachable", retryAfter: 5) }
        let project: ProjectRef
        do {
            guard let found = try await withDeadline(databaseTimeout, { try await database.project(ingestKey: key) }) else {
                throw APIError.unauthorized("unknown \(WireProtocol.ingestKeyHeader)")
            }
            project = found
        } catch let error as APIError {
            throw error
        } catch {
            batcher.markDown(error)
            throw APIError.unavailable("database unreachable", retryAfter: 5)
        }
        if let wait = limiter.acquire(project: project.id) {
            throw APIError.tooManyRequests("project \(project.slug) is over its rate limit", retryAfter: wait)
        }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > maxBodyBytes {
            throw APIError.payloadTooLarge("body is \(length) bytes, over the \(maxBodyBytes)-byte limit")
        }
        let body = try await readBody(request.body, format: format)
        let batch = try IncomingBatch.decode(body)
        guard (1...WireProtocol.maxReportsPerBatch).contains(batch.reports.count) else {
            throw APIError.badRequest("\"reports\" has \(batch.reports.count) reports; send 1 to \(WireProtocol.maxReportsPerBatch)")
        }
        let response = try await store(batch, project: project, logger: context.logger)
        return try Self.accepted(response)
    }

    /// Validates and groups each report, commits the valid ones, and counts outcomes.
    private func store(_ batch: IncomingBatch, project: ProjectRef, logger: Logger) async throws -> IngestResponse {
        let now = Date()
        var items: [IngestItem] = []
        var indices: [Int] = []
        var rejected: [IngestResponse.Rejection] = []
        for (index, slot) in batch.reports.enumerated() {
            switch slot.result {
            case .failure(let failure):
                rejected.append(.init(index: index, error: failure.message))
            case .success(let report):
                if let problem = report.validationError(now: now) {
                    rejected.append(.init(index: index, error: problem))
                    continue
                }
                let signature = Grouping.signature(
                    kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
                    version: project.groupingVersion)
                items.append(IngestItem(projectID: project.id, report: report, signature: signature))
                indices.append(index)
            }
        }
        let outcome = try await batcher.submit(items)
        let accepted = outcome.filter { $0 }.count
        let duplicates = outcome.count - accepted
        metrics.recordIngest(reports: batch.reports.count, accepted: accepted, duplicates: duplicates, rejected: rejected.count)
        logger.debug(
            "reports ingested",
            metadata: [
                "project.slug": "\(project.slug)", "ingest.accepted": "\(accepted)",
                "ingest.duplicates": "\(duplicates)", "ingest.rejected": "\(rejected.count)",
            ])
        return IngestResponse(accepted: accepted, duplicates: duplicates, rejected: rejected)
    }

    /// Reads the body, counting compressed bytes against `maxBodyBytes` and inflating as
    /// it arrives with output capped at `maxDecompressedBytes`: stops at either limit.
    private func readBody(_ body: RequestBody, format: CompressionFormat?) async throws -> [UInt8] {
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

    /// 415 unless the media type is `application/json` (parameters allowed).
    static func checkContentType(_ value: String?) throws {
        guard let value, !value.isEmpty else {
            throw APIError.unsupportedMediaType("missing Content-Type: send application/json")
        }
        let media = value.split(separator: ";", maxSplits: 1).first.map { $0.trimmingWhitespace().lowercased() } ?? ""
        guard media == WireProtocol.mediaType else {
            throw APIError.unsupportedMediaType("unsupported Content-Type '\(value)': send application/json")
        }
    }

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

    static func accepted(_ body: IngestResponse) throws -> Response {
        let data = try JSONEncoder().encode(body)
        return Response(
            status: .accepted,
            headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
