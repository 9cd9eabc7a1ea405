import CrashCompression
import CrashGrouping
import CrashIngest
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
    /// Body bytes in flight across all requests (received plus decoded).
    let budget: BodyByteBudget

    static let keyHeader = HTTPField.Name(WireProtocol.ingestKeyHeader)!

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.post(RouterPath(WireProtocol.reportsPath), use: ingest)
    }

    @Sendable func ingest(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let key = request.headers[Self.keyHeader], !key.isEmpty else {
            throw APIError.unauthorized("missing \(WireProtocol.ingestKeyHeader) header")
        }
        try Self.checkContentType(request.headers[.contentType])
        let reader = try Self.ingestError {
            try IngestBodyReader(
                contentEncoding: request.headers[.contentEncoding], maxBodyBytes: maxBodyBytes,
                maxDecompressedBytes: maxDecompressedBytes)
        }
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
        // Held until the request ends, reports included (they are no larger than the body).
        let share = BodyByteBudget.Reservation(budget)
        for try await chunk in request.body {
            try share.grow(to: reader.receivedBytes + reader.decodedBytes + chunk.readableBytes)
            try Self.ingestError { try chunk.withUnsafeReadableBytes { try reader.feed($0) } }
            try share.grow(to: reader.receivedBytes + reader.decodedBytes)
        }
        let batch = try Self.ingestError { try reader.finish(now: Date(), version: project.groupingVersion) }
        let response = try await store(batch, project: project, logger: context.logger)
        withExtendedLifetime(share) {}
        return try Self.accepted(response)
    }

    /// Commits the valid reports of `batch`, and counts outcomes.
    private func store(_ batch: IngestBatch, project: ProjectRef, logger: Logger) async throws -> IngestResponse {
        let items = batch.accepted.map { IngestItem(projectID: project.id, report: $0.report, signature: $0.signature) }
        let rejected = batch.rejected
        let outcome = try await batcher.submit(items)
        let accepted = outcome.filter { $0 }.count
        let duplicates = outcome.count - accepted
        metrics.recordIngest(reports: batch.count, accepted: accepted, duplicates: duplicates, rejected: rejected.count)
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

    /// Runs a step of the ingest pipeline, turning its refusal into the client's error.
    static func ingestError<T>(_ step: () throws -> T) throws -> T {
        do {
            return try step()
        } catch let error as IngestError {
            throw APIError(ingest: error)
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
