import CoreMetrics
import Foundation
import HTTPTypes
import Hummingbird
import Metrics
import NIOCore
import Synchronization

/// One request's claim on its project's daily quota (data-protection.md, "Daily quota"),
/// carried by each of the request's ``IngestItem``s into the group-commit transaction.
///
/// The transaction (``PostgresIngestStore``) locks the project's counter row of the UTC day,
/// counts the request's new reports (after the ledger's duplicate check, under that lock, so
/// replicas count exactly), and either adds them to the counter or stores nothing of the
/// request and records the refusal here. A class: the items of one request share it, and the
/// transaction tells the requests of a batch apart by its identity.
final class QuotaClaim: Sendable {
    /// Reports the project may newly store per UTC day.
    let limit: Int
    private let refusal = Mutex<Int?>(nil)

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Reports that were still left in the day when the transaction refused the request; nil
    /// while it fits.
    var refusedRemaining: Int? { refusal.withLock { $0 } }

    func refuse(remaining: Int) { refusal.withLock { $0 = max(0, remaining) } }

    /// Forgets a refusal of a transaction that is being retried.
    func reset() { refusal.withLock { $0 = nil } }
}

/// The 429 of a request whose new reports do not fit in what is left of its project's day:
/// `Retry-After` up to the next UTC midnight and `{"error": ..., "quotaRemaining": n}`.
struct QuotaExceeded: HTTPResponseError, CustomStringConvertible, Sendable {
    /// New reports the project may still store today.
    let remaining: Int
    /// Whole seconds to the next UTC midnight, at least 1.
    let retryAfter: Int

    init(remaining: Int, now: Date = Date()) {
        self.remaining = remaining
        retryAfter = Self.secondsToMidnight(after: now)
    }

    var status: HTTPResponse.Status { .tooManyRequests }

    var message: String {
        "the project's daily quota is used up: \(remaining) more new reports fit today (UTC); retry after the quota resets, or send at most quotaRemaining new reports"
    }

    var description: String { "429 \(message)" }

    /// Whole seconds from `now` to the next UTC midnight, rounded up, at least 1 and at most 86,400.
    static func secondsToMidnight(after now: Date) -> Int {
        let seconds = now.timeIntervalSince1970
        let midnight = (seconds / 86_400).rounded(.down) * 86_400 + 86_400
        return min(86_400, max(1, Int((midnight - seconds).rounded(.up))))
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var body = ByteBuffer()
        body.writeStaticString("{\"error\":")
        JSONWriter.string(message, into: &body)
        body.writeString(",\"quotaRemaining\":\(remaining)}")
        return JSONResponse.response(.tooManyRequests, body, headers: [.retryAfter: String(retryAfter)])
    }

    /// The Sentry door's `X-Sentry-Rate-Limits` value for a dropped event.
    var sentryRateLimits: String { "\(retryAfter):error:project:quota_exceeded" }
}

/// Where the ingest doors find a project's quota and retention (data-protection.md, "Project
/// settings"): a cached read, once per request.
protocol ProjectLimitsSource: Sendable {
    func limits(of project: Int64) async throws -> ProjectLimits
}

/// A project's daily quota (nil: none) and the days its reports are kept.
struct ProjectLimits: Sendable, Hashable {
    var dailyQuota: Int?
    var retentionDays: Int
}

/// Every project alike: the server's defaults (no quota, `CRASHGUARD_RETENTION_DAYS`).
struct ServerDefaultLimits: ProjectLimitsSource {
    let retentionDays: Int
    func limits(of project: Int64) async throws -> ProjectLimits { ProjectLimits(dailyQuota: nil, retentionDays: retentionDays) }
}

extension IngestBatcher {
    /// Submits one request's items under `quota` (nil: none) and throws ``QuotaExceeded``
    /// when the transaction refused them: then nothing of the request was stored.
    func submit(_ items: [IngestItem], quota: QuotaClaim?) async throws -> Outcome {
        let outcome = try await submit(items)
        if let remaining = quota?.refusedRemaining { throw QuotaExceeded(remaining: remaining) }
        return outcome
    }
}

extension ServerMetrics {
    /// Counts one request the daily quota refused (`crashguard_quota_refusals_total`, by door:
    /// `reports`, `sentry`, `apple`) and its reports (`crashguard_reports_total{outcome="over_quota"}`).
    func recordQuotaRefusal(door: String, reports: Int) {
        Metrics.Counter(label: "crashguard_quota_refusals_total", dimensions: [("door", door)], factory: factory).increment()
        Metrics.Counter(label: "crashguard_reports_total", dimensions: [("outcome", "over_quota")], factory: factory)
            .increment(by: reports)
    }
}

/// The ingest doors' limits from the project settings (``ProjectSettingsCache``): the same
/// cached read as the scrubber's, with the server's retention where the project has none.
struct CachedProjectLimits: ProjectLimitsSource {
    let cache: ProjectSettingsCache
    let serverRetentionDays: Int

    func limits(of project: Int64) async throws -> ProjectLimits {
        let settings = try await cache.settings(project: project)
        return ProjectLimits(dailyQuota: settings.dailyQuota, retentionDays: settings.retentionDays(serverDefault: serverRetentionDays))
    }
}
