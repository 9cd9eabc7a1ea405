import CrashIngest
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics

/// `POST /v1/sessions` (release-health.md, "Doors"): session updates from CrashGuard's SDK,
/// behind the same key check, rate limit, encodings, size limits and body budget as
/// `/v1/reports` (``IngestAuthenticationMiddleware``, ``IngestBody``). Answers 202 with
/// accepted/duplicates/rejected once every valid update is committed.
struct SessionsController: Sendable {
    let authenticator: IngestAuthenticator
    let ingest: SessionIngest
    let body: IngestBody

    static let path = "/v1/sessions"
    static let maxUpdates = 1000

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.group()
            .add(middleware: IngestAuthenticationMiddleware(authenticator: authenticator, door: .reports))
            .post(RouterPath(Self.path), use: post)
    }

    @Sendable func post(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireIngestProject()
        try IngestController.checkContentType(request.headers.value(.contentType))
        let (bytes, share) = try await body.readWhole(request, project: project.id)
        let now = Date()
        let (updates, rejected) = try await IngestBody.reading(bytes.count) { try Self.parse(bytes, now: now) }
        let outcomes = try await ingest.commit(project: project, updates: updates, aggregates: [], logger: context.logger)
        let accepted = outcomes.filter { $0 == .accepted }.count
        ingest.metrics.countSessionUpdates(accepted: accepted, duplicates: outcomes.count - accepted, rejected: rejected.count)
        withExtendedLifetime(share) {}
        return IngestController.accepted(
            IngestResponse(accepted: accepted, duplicates: outcomes.count - accepted, rejected: rejected))
    }

    /// The body's valid updates in order, and the rejected ones by index; a 400 for a body
    /// that is not `{"sessions": [...]}` with 1 to 1000 elements.
    static func parse(_ bytes: [UInt8], now: Date) throws -> ([SessionUpdate], [IngestResponse.Rejection]) {
        guard !bytes.isEmpty else { throw APIError.badRequest("body is empty: send {\"sessions\": [...]}") }
        guard JSONDepth.within(bytes, limit: JSONDepth.maxDepth) else {
            throw APIError.badRequest("body is nested deeper than \(JSONDepth.maxDepth) levels")
        }
        guard JSONDepth.within(bytes, limit: .max, maxValues: JSONDepth.maxBodyValues) else {
            throw APIError.badRequest("body holds more than \(JSONDepth.maxBodyValues) JSON values: at most 1000 updates")
        }
        guard let json = SessionJSON.decode(bytes) else { throw APIError.badRequest("body is not JSON") }
        guard let object = json.object else { throw APIError.badRequest("body is not a JSON object with a sessions array") }
        guard case .array(let elements)? = object["sessions"] else {
            throw APIError.badRequest("sessions: missing or not an array")
        }
        guard (1...maxUpdates).contains(elements.count) else {
            throw APIError.badRequest("sessions: must hold 1 to \(maxUpdates) updates")
        }
        var updates: [SessionUpdate] = []
        var rejected: [IngestResponse.Rejection] = []
        for (index, element) in elements.enumerated() {
            switch SessionUpdate.parse(element, now: now, requireSID: true) {
            case .success(let update): updates.append(update)
            case .failure(let error): rejected.append(IngestResponse.Rejection(index: index, error: error.message))
            }
        }
        return (updates, rejected)
    }
}

/// Commits session updates and aggregates for both doors: under the database deadline, with
/// the ingest doors' 503 answers (nothing stored) when the database is down or busy.
struct SessionIngest: Sendable {
    let store: any SessionStore
    let batcher: IngestBatcher
    let metrics: ServerMetrics
    let deadline: Duration

    func commit(
        project: ProjectRef, updates: [SessionUpdate], aggregates: [SessionAggregate], logger: Logger
    ) async throws
        -> [SessionOutcome]
    {
        guard !updates.isEmpty || !aggregates.isEmpty else { return [] }
        if batcher.isDatabaseDown { throw APIError.databaseUnreachable }
        let store = self.store
        do {
            return try await withDeadline(deadline) {
                try await store.applySessions(project: project.id, updates: updates, aggregates: aggregates)
            }
        } catch let error where isTimeoutError(error) || ["40P01", "40001"].contains(sqlState(error)) {
            throw APIError.unavailable("database busy; retry later", retryAfter: 1)
        } catch let error where isConnectionError(error) {
            if !(error is DeadlineExceeded) { batcher.markDown(error) }
            logger.warning("sessions not stored", metadata: ["error.message": "\(error)"])
            throw APIError.databaseUnreachable
        }
    }
}

extension ServerMetrics {
    /// Counts session updates by outcome (`crashguard_session_updates_total`).
    func countSessionUpdates(accepted: Int, duplicates: Int, rejected: Int) {
        for (outcome, n) in [("accepted", accepted), ("duplicate", duplicates), ("rejected", rejected)] {
            Metrics.Counter(label: "crashguard_session_updates_total", dimensions: [("outcome", outcome)], factory: factory)
                .increment(by: n)
        }
    }

    /// Counts sessions added by Sentry aggregates (`crashguard_session_aggregates_total`).
    func countSessionAggregates(sessions: Int64) {
        Metrics.Counter(label: "crashguard_session_aggregate_sessions_total", factory: factory).increment(by: Int(sessions))
    }
}

/// The shape of a JSON text, found in one pass over its bytes without decoding it (strings
/// skipped): how deep it nests and how many values its arrays and objects hold, so that a body
/// of millions of tiny values is refused before a decoder maps each of them.
enum JSONDepth {
    static let maxDepth = 32
    /// Values (commas outside strings) in a `/v1/sessions` body: 1000 updates of a few dozen
    /// fields each stay far below it.
    static let maxBodyValues = 200_000
    /// Values in one Sentry `session` or `sessions` item.
    static let maxItemValues = 20_000

    static func within(_ bytes: some Collection<UInt8>, limit: Int, maxValues: Int = .max) -> Bool {
        var depth = 0
        var values = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: ","):
                values += 1
                if values > maxValues { return false }
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return false }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return true
    }
}
