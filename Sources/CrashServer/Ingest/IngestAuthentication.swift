import CrashIngest
import CrashWire
import HTTPTypes
import Hummingbird

/// The one ingest-key check of every ingest door (`/v1/reports` and the Sentry routes): the
/// database-down short cut, the key's project from ``IngestKeyCache`` or PostgreSQL under the
/// database deadline (a failure marks the database down), and the project's rate limit.
///
/// Its refusals are ``APIError``s in `/v1/reports`' terms (401, 429, 503); a door renders them
/// its own way (the Sentry routes: 403 and 429, see ``SentryResponseMiddleware``).
struct IngestAuthenticator: Sendable {
    let database: CrashDatabase
    let keys: IngestKeyCache
    let batcher: IngestBatcher
    /// One limiter for every ingest door: a project's rate counts all its requests.
    let limiter: RateLimiter
    let databaseTimeout: Duration
    /// Each project's settings, for its scrubber (data-protection.md).
    let settings: ProjectSettingsCache

    /// A 401 of an ingest door. Its challenge names the header that carries the key (an
    /// auth-scheme of its own: the key is not a bearer token), where the read API's says `Bearer`.
    static func refused(_ message: String) -> APIError {
        .unauthorized(message, challenge: #"CrashKey header="\#(WireProtocol.ingestKeyHeader)""#)
    }

    /// The project of `key`, after taking a token of its rate limit. With `sentryID`, the key
    /// must also belong to the project the Sentry path names.
    func authenticate(_ key: String, sentryID: Int64? = nil) async throws -> ProjectRef {
        if batcher.isDatabaseDown { throw APIError.databaseUnreachable }
        let owner: IngestKeyCache.Owner?
        do {
            owner = try await keys.owner(of: key) { hash in
                try await withDeadline(databaseTimeout) { try await PostgresProjectStore(database: database).owner(ingestKeyHash: hash) }
            }
        } catch {
            batcher.markDown(error)
            throw APIError.databaseUnreachable
        }
        if let sentryID {
            guard let owner, owner.sentryID == sentryID else {
                throw Self.refused("the key is not a key of project \(sentryID)")
            }
        }
        guard let project = owner?.project else { throw Self.refused("unknown \(WireProtocol.ingestKeyHeader)") }
        if let wait = limiter.acquire(project: project.id) {
            throw APIError.tooManyRequests("project \(project.slug) is over its rate limit", retryAfter: wait)
        }
        return project
    }

    /// The scrubber of `project`'s reports, every door's (data-protection.md, "Scrubbing"): from
    /// the settings cache, or read under the database deadline (503 when it cannot be).
    func scrubber(for project: ProjectRef) async throws -> ReportScrubber {
        do {
            return try await withDeadline(databaseTimeout) { try await settings.scrubber(project: project.id) }
        } catch {
            batcher.markDown(error)
            throw APIError.databaseUnreachable
        }
    }
}

/// Authenticates an ingest door before its handler runs: takes the key where the door's
/// clients send it, and puts its project into ``CrashRequestContext/ingestProject``.
///
/// `/v1/reports`: `X-Crash-Key`, required. The Sentry routes: `X-Sentry-Auth` (or
/// `Authorization: Sentry ...`) or the `sentry_key` query parameter, for the project the path
/// names; without either the handler may still find one in an envelope's `dsn`, and asks the
/// same ``IngestAuthenticator``.
struct IngestAuthenticationMiddleware: RouterMiddleware {
    typealias Context = CrashRequestContext

    enum Door: Sendable {
        case reports
        case sentry
    }

    let authenticator: IngestAuthenticator
    let door: Door

    static let keyHeader = HTTPField.Name(WireProtocol.ingestKeyHeader)!

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        switch door {
        case .reports:
            guard let key = request.headers.value(Self.keyHeader), !key.isEmpty else {
                throw IngestAuthenticator.refused("missing \(WireProtocol.ingestKeyHeader) header")
            }
            context.ingestProject = try await authenticator.authenticate(key)
        case .sentry:
            let sentryID = try context.sentryID()
            if let key = SentryAuth.key(headers: request.headers, query: request.uri.queryParameters.get("sentry_key")) {
                context.ingestProject = try await authenticator.authenticate(key, sentryID: sentryID)
            }
        }
        return try await next(request, context)
    }
}

extension CrashRequestContext {
    /// The project ``IngestAuthenticationMiddleware`` authenticated; a route without the
    /// middleware is a programming error, answered 401 rather than served unauthenticated.
    func requireIngestProject() throws -> ProjectRef {
        guard let ingestProject else { throw IngestAuthenticator.refused("missing \(WireProtocol.ingestKeyHeader) header") }
        return ingestProject
    }
}
