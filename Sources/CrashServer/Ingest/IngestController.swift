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
        let format = try IngestBody.compression(request.headers[.contentEncoding])
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
        let reader = IngestBody(maxBodyBytes: maxBodyBytes, maxDecompressedBytes: maxDecompressedBytes)
        try reader.checkDeclaredLength(request.headers)
        let body = try await reader.read(request.body, format: format)
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
                items.append(IngestItem(project: project, report: report))
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

    static func accepted(_ body: IngestResponse) throws -> Response {
        let data = try JSONEncoder().encode(body)
        return Response(
            status: .accepted,
            headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
