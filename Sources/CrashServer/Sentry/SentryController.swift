import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The door for Sentry SDKs: `POST /api/{sentryId}/envelope/` and `POST /api/{sentryId}/store/`
/// (the contract, "Ingest from Sentry SDKs"; docs/sentry.md).
///
/// The body is read by the same ``IngestBody`` as `/v1/reports` (encodings, size limits),
/// each event becomes a ``Report`` (``SentryEvent/report(receivedAt:id:)``), and the reports
/// go through the same validation, grouping and ``IngestBatcher`` commit, so a crash groups
/// and counts alike whichever door it came in by. The answers follow Sentry's protocol:
/// `{"detail": ...}` bodies, 403 for a bad key, `X-Sentry-Error` on a 400, and 429 with
/// `X-Sentry-Rate-Limits` (which SDKs obey; they drop an event on a 5xx) whenever
/// `/v1/reports` would say 429 or 503.
struct SentryController: Sendable {
    let authenticator: IngestAuthenticator
    let batcher: IngestBatcher
    let metrics: ServerMetrics
    let body: IngestBody
    /// The project's daily quota and retention, read once per request.
    let limits: any ProjectLimitsSource
    /// Counts `session` and `sessions` items (release-health.md); nil: they are ignored.
    var sessions: SessionIngest? = nil

    static let errorHeader = HTTPField.Name("X-Sentry-Error")!
    static let rateLimitsHeader = HTTPField.Name("X-Sentry-Rate-Limits")!

    func addRoutes(to router: Router<CrashRequestContext>) {
        let api = router.group("/api/:sentryId")
            .add(middleware: SentryResponseMiddleware())
            .add(middleware: IngestAuthenticationMiddleware(authenticator: authenticator, door: .sentry))
        api.post("envelope", use: envelope)
        api.post("store", use: store)
        router.on("/api/:sentryId/envelope", method: .options, use: preflight)
        router.on("/api/:sentryId/store", method: .options, use: preflight)
    }

    /// An envelope with a key in its headers or query was authenticated by the middleware
    /// before its first body byte was read. One without is read up to the end of its first
    /// line, the envelope header (at most ``SentryEnvelope/maxHeaderLineBytes`` decoded), and
    /// no further until the key of its `dsn` is checked: without one, 403 at once, while the
    /// client may still be sending (the connection is then closed, ``ConnectionGuardHandler``).
    @Sendable func envelope(request: Request, context: CrashRequestContext) async throws -> Response {
        let format = try IngestBody.compression(request.headers[.contentEncoding])
        try body.checkDeclaredLength(request.headers)
        let share = BodyByteBudget.Reservation(body.budget, project: context.ingestProject?.id)
        try await body.admit(request.headers, coding: format, holding: share)
        let whole = try body.wholeBody(request.body, format: format)
        var project = context.ingestProject
        if project == nil {
            project = try await authenticateByHeaderLine(whole, holding: share, context: context)
        }
        guard let project else { throw Self.missingKey }
        let bytes = try await body.readRest(whole, holding: share)
        guard !bytes.isEmpty else { throw APIError.badRequest("body is empty") }
        let (header, itemsStart) = try Self.malformedIs400 { try SentryEnvelope.parseHeader(bytes) }
        let receivedAt = Date()
        let envelopeID = header.eventID.flatMap { UUIDText.parse($0, compact: true) }
        let (reports, sessions) = try await IngestBody.reading(bytes.count) {
            try Self.malformedIs400 {
                let items = try SentryEnvelope.parseItems(bytes, from: itemsStart)
                let reports = try items.filter { $0.type == "event" }.map {
                    try SentryEvent.decode($0.payload).report(receivedAt: receivedAt, id: envelopeID)
                }
                return (reports, SentryEnvelope.sessions(in: items, now: receivedAt))
            }
        }
        // An event over the daily quota is dropped; the envelope's sessions are still stored,
        // and the 200 carries the rate limit, as Relay answers (data-protection.md).
        var dropped: QuotaExceeded?
        do {
            try await commit(reports, project: project, logger: context.logger)
        } catch let refusal as QuotaExceeded where sessions.items > 0 && self.sessions != nil {
            dropped = refusal
        }
        try await commit(sessions, project: project, logger: context.logger)
        withExtendedLifetime(share) {}
        if let dropped {
            var response = Self.success(id: nil)
            response.headers[Self.rateLimitsHeader] = dropped.sentryRateLimits
            return response
        }
        // Sessions without an event: 200 {} once they are committed (release-health.md).
        return Self.success(id: reports.first?.id ?? (sessions.items > 0 ? nil : envelopeID))
    }

    /// The project of the key in the `dsn` of the envelope's first line, read and no more;
    /// `share` becomes the project's. 403 when the line names no key (or is no JSON object),
    /// 400 when it is longer than ``SentryEnvelope/maxHeaderLineBytes``.
    private func authenticateByHeaderLine(
        _ whole: WholeBodyReading, holding share: BodyByteBudget.Reservation, context: CrashRequestContext
    ) async throws -> ProjectRef {
        let sentryID = try context.sentryID()
        guard let line = try await body.readFirstLine(whole, maxBytes: SentryEnvelope.maxHeaderLineBytes, holding: share) else {
            throw APIError.badRequest(
                "envelope header: the first line is longer than \(SentryEnvelope.maxHeaderLineBytes) bytes")
        }
        guard let key = (try? SentryEnvelope.parseHeaderLine(line))?.dsn.flatMap(SentryDSN.publicKey(ofDSN:)) else {
            throw Self.missingKey
        }
        let project = try await authenticator.authenticate(key, sentryID: sentryID)
        try share.assign(to: project.id)
        return project
    }

    @Sendable func store(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let project = context.ingestProject else { throw Self.missingKey }
        let format = try IngestBody.compression(request.headers[.contentEncoding])
        let share = BodyByteBudget.Reservation(body.budget, project: project.id)
        let bytes = try await readBody(request, format: format, holding: share)
        let report = try await IngestBody.reading(bytes.count) {
            try Self.malformedIs400 { try SentryEvent.decode(bytes).report(receivedAt: Date()) }
        }
        try await commit([report], project: project, logger: context.logger)
        withExtendedLifetime(share) {}
        return Self.success(id: report.id)
    }

    /// CORS preflight of browser SDKs: POST from any origin with Sentry's headers.
    @Sendable func preflight(request: Request, context: CrashRequestContext) async throws -> Response {
        var headers = Self.corsHeaders
        headers[.accessControlAllowMethods] = "POST, OPTIONS"
        headers[.accessControlAllowHeaders] =
            request.headers[.accessControlRequestHeaders]
            ?? "Content-Type, Content-Encoding, X-Sentry-Auth, Authorization, sentry-trace, baggage"
        headers[.accessControlMaxAge] = "3600"
        return Response(status: .ok, headers: headers)
    }

    private func readBody(_ request: Request, format: ContentCoding, holding share: BodyByteBudget.Reservation) async throws -> [UInt8] {
        try body.checkDeclaredLength(request.headers)
        try await body.admit(request.headers, coding: format, holding: share)
        let bytes = try await body.read(request.body, format: format, holding: share)
        guard !bytes.isEmpty else { throw APIError.badRequest("body is empty") }
        return bytes
    }

    /// Runs a step of reading an envelope or event, turning its refusal into a 400.
    private static func malformedIs400<T>(_ step: () throws -> T) throws -> T {
        do {
            return try step()
        } catch let error as SentryEnvelope.Malformed {
            throw APIError.badRequest(error.description)
        }
    }

    /// Validates, groups and commits the reports; returns once they are durable.
    ///
    /// An event older than the project's retention takes the time it was received, like any
    /// event outside the accepted window; events that do not fit in the daily quota are refused
    /// whole (``QuotaExceeded``).
    private func commit(_ reports: [Report], project: ProjectRef, logger: Logger) async throws {
        guard !reports.isEmpty else { return }
        let now = Date()
        let limits = try await limits.limits(of: project.id)
        let retention = Retention(days: limits.retentionDays)
        let quota = limits.dailyQuota.map(QuotaClaim.init(limit:))
        let scrubber = try await authenticator.scrubber(for: project)
        var items: [IngestItem] = []
        for var report in reports {
            if retention.isPast(report.timestamp, now: now) { report.timestamp = now }
            if let problem = report.validationError(now: now) {
                metrics.recordIngest(reports: reports.count, accepted: 0, duplicates: 0, rejected: reports.count)
                throw APIError.badRequest("event \(Self.hex(report.id)): \(problem)")
            }
            items.append(IngestItem(project: project, report: report, scrubber: scrubber, quota: quota))
        }
        metrics.recordScrubbed(items, door: "sentry")
        let outcome: IngestBatcher.Outcome
        do {
            outcome = try await batcher.submit(items, quota: quota)
        } catch let refusal as QuotaExceeded {
            metrics.recordQuotaRefusal(door: "sentry", reports: items.count)
            throw refusal
        }
        let accepted = outcome.filter { $0 }.count
        metrics.recordIngest(reports: reports.count, accepted: accepted, duplicates: outcome.count - accepted, rejected: 0)
        logger.debug(
            "sentry events ingested",
            metadata: ["project.slug": "\(project.slug)", "ingest.accepted": "\(accepted)", "ingest.events": "\(reports.count)"])
    }

    /// Commits the envelope's session updates and aggregates; returns once they are durable.
    private func commit(_ found: SentrySessions, project: ProjectRef, logger: Logger) async throws {
        guard let sessions, found.items > 0 else { return }
        let outcomes = try await sessions.commit(
            project: project, updates: found.updates, aggregates: found.aggregates, logger: logger)
        let accepted = outcomes.filter { $0 == .accepted }.count
        sessions.metrics.countSessionUpdates(accepted: accepted, duplicates: outcomes.count - accepted, rejected: found.dropped)
    }

    private static let missingKey = APIError.unauthorized(
        "missing sentry_key: send X-Sentry-Auth, the sentry_key query parameter or an envelope dsn")

    static let corsHeaders: HTTPFields = [
        .accessControlAllowOrigin: "*",
        .accessControlExposeHeaders: "X-Sentry-Error, X-Sentry-Rate-Limits, Retry-After",
    ]

    /// 200 `{"id": "<32 hex digits>"}`, or `{}` for an envelope without any event id.
    static func success(id: UUID?) -> Response {
        var object: [String: String] = [:]
        if let id { object["id"] = hex(id) }
        let data = (try? JSONEncoder().encode(object)) ?? Data("{}".utf8)
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A Sentry-style error: `{"detail": ...}`; 403 for a bad key; 429 with `Retry-After` and
    /// `X-Sentry-Rate-Limits` for everything that asks the SDK to come back later (rate
    /// limit, full queue, database unreachable, shutting down); `X-Sentry-Error` on a 400.
    static func failure(_ error: APIError) -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        headers.append(contentsOf: corsHeaders)
        var status = error.status
        switch status {
        case .unauthorized:
            status = .forbidden
        case .tooManyRequests, .serviceUnavailable, .internalServerError:
            // 500 only for an ingest COMMIT left unanswered: Sentry SDKs drop an event on a
            // 5xx, and a retry is counted once.
            status = .tooManyRequests
            let seconds = error.retryAfter ?? 1
            headers[.retryAfter] = String(seconds)
            headers[rateLimitsHeader] = "\(seconds)::organization"
        case .badRequest:
            headers[errorHeader] = String(error.message.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 ? Character($0) : "?" })
        default:
            break
        }
        let data = (try? JSONEncoder().encode(["detail": error.message])) ?? Data("{\"detail\":\"error\"}".utf8)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// The 429 of an event over its project's daily quota: `Retry-After` and
    /// `X-Sentry-Rate-Limits: <seconds>:error:project:quota_exceeded`, which Sentry SDKs obey.
    static func failure(_ refusal: QuotaExceeded) -> Response {
        var headers: HTTPFields = [.contentType: "application/json", .retryAfter: String(refusal.retryAfter)]
        headers.append(contentsOf: corsHeaders)
        headers[rateLimitsHeader] = refusal.sentryRateLimits
        let data = (try? JSONEncoder().encode(["detail": refusal.message])) ?? Data("{\"detail\":\"quota exceeded\"}".utf8)
        return Response(status: .tooManyRequests, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A UUID as Sentry writes event ids: 32 lower-case hex digits.
    static func hex(_ id: UUID) -> String {
        id.uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    }
}

/// Renders the Sentry routes' answers the way Sentry SDKs read them, whatever refused the
/// request (``IngestAuthenticationMiddleware`` included): every ``APIError`` through
/// ``SentryController/failure(_:)``, any other error as 429 (SDKs drop an event on a 5xx),
/// and CORS headers on every answer.
struct SentryResponseMiddleware: RouterMiddleware {
    typealias Context = CrashRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            var response = try await next(request, context)
            for field in SentryController.corsHeaders { response.headers.append(field) }
            return response
        } catch let error as APIError {
            return SentryController.failure(error)
        } catch let refusal as QuotaExceeded {
            return SentryController.failure(refusal)
        } catch {
            context.logger.error(
                "sentry ingest failed", metadata: ["error.type": "\(type(of: error))", "error.message": "\(error)"])
            return SentryController.failure(APIError.unavailable("could not store the event; retry later", retryAfter: 5))
        }
    }
}

extension CrashRequestContext {
    /// The `sentryId` of the path; 400 unless a positive number.
    func sentryID() throws -> Int64 {
        guard let text = parameters.get("sentryId"), let id = Int64(text), id > 0 else {
            throw APIError.badRequest("the project id in the path is not a positive number")
        }
        return id
    }
}
