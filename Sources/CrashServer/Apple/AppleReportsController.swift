import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// `POST /v1/apple/reports` (the contract, `apple.md`, "The Apple door"): Apple's own crash
/// reports, an `.ips` (bug type 309) or a MetricKit `MXDiagnosticPayload`, as reports.
///
/// A thin door over the ingest path of `/v1/reports`: the same ``IngestAuthenticationMiddleware``
/// (the `X-Crash-Key` checked before the first body byte is read, the rate limit), the same
/// ``IngestBody`` (encodings, size limits, the body budget), ``AppleCrashReports`` for the
/// mapping (pure, in CrashIngest), and the same grouping and ``IngestBatcher`` commit, so the
/// answer is `/v1/reports`' 202 `{"accepted", "duplicates", "rejected"}` once the reports are
/// durable. See docs/apple.md.
struct AppleReportsController: Sendable {
    let authenticator: IngestAuthenticator
    let batcher: IngestBatcher
    let metrics: ServerMetrics
    let body: IngestBody
    /// The project's daily quota and retention, read once per request.
    let limits: any ProjectLimitsSource

    static let path = "/v1/apple/reports"
    /// The media types taken; either accepts both formats.
    static let mediaTypes = ["application/x-ips", "application/json"]

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.group()
            .add(middleware: IngestAuthenticationMiddleware(authenticator: authenticator, door: .reports))
            .post(RouterPath(Self.path), use: ingest)
    }

    @Sendable func ingest(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireIngestProject()
        try Self.checkContentType(request.headers.value(.contentType))
        let (bytes, share) = try await body.readWhole(request, project: project.id)
        let limits = try await limits.limits(of: project.id)
        let quota = limits.dailyQuota.map(QuotaClaim.init(limit:))
        let receivedAt = Date()
        var batch = try await IngestBody.reading(bytes.count) {
            try IngestBody.ingestError { try AppleCrashReports.read(bytes, receivedAt: receivedAt) }
        }
        // Like a time outside the accepted window, one past the retention becomes the receive time.
        let retention = Retention(days: limits.retentionDays)
        for i in batch.accepted.indices where retention.isPast(batch.accepted[i].timestamp, now: receivedAt) {
            batch.accepted[i].timestamp = receivedAt
        }
        let scrubber = try await authenticator.scrubber(for: project)
        let items = batch.accepted.map { IngestItem(project: project, report: $0, scrubber: scrubber, quota: quota) }
        metrics.recordScrubbed(items, door: "apple")
        let outcome: IngestBatcher.Outcome
        do {
            outcome = items.isEmpty ? [] : try await batcher.submit(items, quota: quota)
        } catch let refusal as QuotaExceeded {
            metrics.recordQuotaRefusal(door: "apple", reports: items.count)
            throw refusal
        }
        let accepted = outcome.filter { $0 }.count
        let duplicates = outcome.count - accepted
        metrics.recordIngest(reports: batch.count, accepted: accepted, duplicates: duplicates, rejected: batch.rejected.count)
        context.logger.debug(
            "apple crash reports ingested",
            metadata: [
                "project.slug": "\(project.slug)", "apple.format": "\(batch.format)", "ingest.accepted": "\(accepted)",
                "ingest.duplicates": "\(duplicates)", "ingest.rejected": "\(batch.rejected.count)",
            ])
        withExtendedLifetime(share) {}
        return IngestController.accepted(IngestResponse(accepted: accepted, duplicates: duplicates, rejected: batch.rejected))
    }

    /// 415 unless the media type is `application/x-ips` or `application/json` (parameters
    /// allowed, any case).
    static func checkContentType(_ value: String?) throws {
        guard let value, !value.isEmpty else {
            throw APIError.unsupportedMediaType("missing Content-Type: send application/x-ips or application/json")
        }
        let media = value.split(separator: ";", maxSplits: 1).first.map { $0.trimmingWhitespace().lowercased() } ?? ""
        guard mediaTypes.contains(media) else {
            throw APIError.unsupportedMediaType(
                "unsupported Content-Type '\(value)': send application/x-ips or application/json")
        }
    }
}
