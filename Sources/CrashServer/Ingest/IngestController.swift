import CrashCompression
import CrashGrouping
import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// `POST /v1/reports`: authenticated and rate-limited by ``IngestAuthenticationMiddleware``;
/// reads and inflates with caps, validates, groups, and waits for the group commit before
/// answering 202.
struct IngestController: Sendable {
    let authenticator: IngestAuthenticator
    let batcher: IngestBatcher
    let metrics: ServerMetrics
    let body: IngestBody
    /// The project's daily quota and retention, read once per request.
    let limits: any ProjectLimitsSource

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.group()
            .add(middleware: IngestAuthenticationMiddleware(authenticator: authenticator, door: .reports))
            .post(RouterPath(WireProtocol.reportsPath), use: ingest)
    }

    @Sendable func ingest(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireIngestProject()
        try Self.checkContentType(request.headers.value(.contentType))
        let coding = try IngestBody.compression(request.headers.value(.contentEncoding))
        // Held until the request ends, reports included (they are no larger than the body).
        let share = BodyByteBudget.Reservation(body.budget, project: project.id)
        let (items, count, rejected, quota) = try await decode(request, project: project, coding: coding, holding: share)
        metrics.recordScrubbed(items, door: "reports")
        let response = try await store(
            items, count: count, rejected: rejected, project: project, quota: quota, logger: context.logger)
        withExtendedLifetime(share) {}
        return Self.accepted(response)
    }

    /// Reads the body into `share` and decodes it into the items to store: its reports, the
    /// count it held and those refused. The reader (the decoded body and its decoder's state,
    /// about 90 KB for gzip) ends here, before the commit is awaited: what waits for it is the
    /// items, whose stacks are one buffer each instead of a string per frame
    /// (``IngestItem/stack``): the body's own text.
    private func decode(
        _ request: Request, project: ProjectRef, coding: ContentCoding, holding share: BodyByteBudget.Reservation
    ) async throws -> (items: [IngestItem], count: Int, rejected: [IngestResponse.Rejection], quota: QuotaClaim?) {
        let reader = try IngestBody.ingestError {
            try IngestBodyReader(
                coding: coding, maxBodyBytes: body.maxBodyBytes, maxDecompressedBytes: body.maxDecompressedBytes)
        }
        try body.checkDeclaredLength(request.headers)
        try await body.admit(request.headers, coding: coding, holding: share)
        try await body.read(request.body, into: reader, holding: share)
        let scrubber = try await authenticator.scrubber(for: project)
        let limits = try await limits.limits(of: project.id)
        let quota = limits.dailyQuota.map(QuotaClaim.init(limit:))
        let (items, count, rejected) = try await IngestBody.reading(reader.outputBytes) {
            try IngestBody.ingestError {
                let now = Date()
                let batch = try reader.finish(now: now, version: project.groupingVersion, scrubber: scrubber)
                    .rejectingPastRetention(retentionDays: limits.retentionDays, now: now)
                let items = batch.accepted.map {
                    IngestItem(
                        projectID: project.id, report: $0.report, signature: $0.signature, stackJSON: $0.stackJSON, quota: quota,
                        scrubbed: $0.scrubbed)
                }
                return (items, batch.count, batch.rejected)
            }
        }
        return (items, count, rejected, quota)
    }

    /// Commits `items`, the valid reports of a body of `count`, and counts outcomes.
    private func store(
        _ items: [IngestItem], count: Int, rejected: [IngestResponse.Rejection], project: ProjectRef, quota: QuotaClaim?,
        logger: Logger
    ) async throws -> IngestResponse {
        let outcome: IngestBatcher.Outcome
        do {
            outcome = try await batcher.submit(items, quota: quota)
        } catch let refusal as QuotaExceeded {
            metrics.recordQuotaRefusal(door: "reports", reports: items.count)
            throw refusal
        }
        let accepted = outcome.filter { $0 }.count
        let duplicates = outcome.count - accepted
        metrics.recordIngest(reports: count, accepted: accepted, duplicates: duplicates, rejected: rejected.count)
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
        // What clients send, decided without splitting and lowercasing it.
        if value == WireProtocol.mediaType { return }
        let media = value.split(separator: ";", maxSplits: 1).first.map { $0.trimmingWhitespace().lowercased() } ?? ""
        guard media == WireProtocol.mediaType else {
            throw APIError.unsupportedMediaType("unsupported Content-Type '\(value)': send application/json")
        }
    }

    /// The 202 with `body` as JSON (``acceptedBody(_:)``).
    static func accepted(_ body: IngestResponse) -> Response {
        Response(status: .accepted, headers: jsonHeaders, body: .init(byteBuffer: acceptedBody(body)))
    }

    /// `body` as JSON, written byte by byte: `JSONEncoder` (and the headers built anew) were
    /// about 2 % of the server's CPU per single-report request (docs/performance.md).
    static func acceptedBody(_ body: IngestResponse) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(64)
        buffer.writeStaticString("{\"accepted\":")
        buffer.writeString(String(body.accepted))
        buffer.writeStaticString(",\"duplicates\":")
        buffer.writeString(String(body.duplicates))
        buffer.writeStaticString(",\"rejected\":[")
        for (i, rejection) in body.rejected.enumerated() {
            buffer.writeStaticString(i == 0 ? "{\"index\":" : ",{\"index\":")
            buffer.writeString(String(rejection.index))
            buffer.writeStaticString(",\"error\":")
            JSONWriter.string(rejection.error, into: &buffer)
            buffer.writeStaticString("}")
        }
        buffer.writeStaticString("]}")
        return buffer
    }

    private static let jsonHeaders: HTTPFields = [.contentType: "application/json; charset=utf-8"]
}
