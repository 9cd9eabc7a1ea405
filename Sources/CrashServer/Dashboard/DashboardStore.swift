import Foundation
import NIOCore
import PostgresNIO

/// What the dashboard reads and writes: the narrow seam between its pages and the storage.
///
/// The list, detail, reports and stats come from the same functions the REST query API
/// answers with, so a page and `GET /v1/...` never disagree.
protocol DashboardStore: Sendable {
    /// Signs in: stores `session`, ending at `expires`, for the project `readToken` belongs
    /// to, bound to the token, and returns that project; nil (nothing stored) when the token
    /// belongs to no project.
    func startSession(_ session: DashboardSessions.Session, expires: Date, readToken: String) async throws -> ProjectRef?
    /// The project of a stored session that has not expired and whose project still has the
    /// read token it was started with; nil otherwise.
    func project(session: DashboardSessions.Session) async throws -> ProjectRef?
    /// Signs out: deletes the session, so no copy of its cookie opens a page again.
    func endSession(_ session: DashboardSessions.Session) async throws
    /// One page of the crash list: `GET /v1/projects/{p}/crashes` with these parameters.
    func crashes(_ project: ProjectRef, _ parameters: [String: String]) async throws -> GroupListBody
    /// A group's detail over `window`.
    func crash(_ project: ProjectRef, id: Int64, window: TimeWindow) async throws -> GroupDetailBody
    /// The newest reports of a group, with stacks.
    func reports(_ project: ProjectRef, id: Int64, limit: Int) async throws -> [StoredReport]
    /// Project-wide counts: `GET /v1/projects/{p}/stats` with these parameters.
    func stats(_ project: ProjectRef, _ parameters: [String: String]) async throws -> StatsBody
    /// Sets a group's status; false when the project has no such group.
    func triage(_ project: ProjectRef, id: Int64, status: GroupStatus, resolvedIn: String?) async throws -> Bool
    /// One page of the releases list: `GET /v1/projects/{p}/releases` with these parameters.
    func releases(_ project: ProjectRef, _ parameters: [String: String]) async throws -> ReleaseListBody
    /// A release's detail: `GET /v1/projects/{p}/releases/{version}` with these parameters.
    func release(_ project: ProjectRef, version: String, _ parameters: [String: String]) async throws -> ReleaseDetailBody
}

/// The dashboard on the server's PostgreSQL, through the query API's functions.
struct PostgresDashboardStore: DashboardStore {
    let database: CrashDatabase
    var queries: QueryController<PostgresQueryStore> { QueryController(store: PostgresQueryStore(database: database)) }

    func startSession(_ session: DashboardSessions.Session, expires: Date, readToken: String) async throws -> ProjectRef? {
        try await database.startDashboardSession(idHash: session.idHash, expires: expires, readTokenHash: ProjectKeys.hash(readToken))
    }

    func project(session: DashboardSessions.Session) async throws -> ProjectRef? {
        try await database.dashboardSessionProject(idHash: session.idHash)
    }

    func endSession(_ session: DashboardSessions.Session) async throws {
        try await database.endDashboardSession(idHash: session.idHash)
    }

    func crashes(_ project: ProjectRef, _ parameters: [String: String]) async throws -> GroupListBody {
        try await queries.listBody(project: project, QueryParameters(parameters))
    }

    func crash(_ project: ProjectRef, id: Int64, window: TimeWindow) async throws -> GroupDetailBody {
        try await queries.detailBody(project: project, group: id, window: window)
    }

    func reports(_ project: ProjectRef, id: Int64, limit: Int) async throws -> [StoredReport] {
        try await PostgresQueryStore(database: database).read { reader in
            try await reader.reports(project: project.id, group: id, after: nil, limit: limit, includeStack: true).map(\.report)
        }
    }

    func stats(_ project: ProjectRef, _ parameters: [String: String]) async throws -> StatsBody {
        try await queries.statsBody(project: project, QueryParameters(parameters))
    }

    func triage(_ project: ProjectRef, id: Int64, status: GroupStatus, resolvedIn: String?) async throws -> Bool {
        try await PostgresQueryStore(database: database).triage(project: project.id, group: id, status: status, resolvedIn: resolvedIn)
    }
}

/// Dashboard sessions in PostgreSQL (`dashboard_sessions`), always on the primary: a session
/// started or ended on one replica counts on every other at its next request, and a standby
/// that lags cannot revive a session that was ended.
extension CrashDatabase {
    /// Stores a session for the project whose read token has the SHA-256 `readTokenHash`,
    /// bound to that hash, and returns the project (nil when no project has the token).
    /// Sessions past their end are deleted on the way.
    func startDashboardSession(idHash: Data, expires: Date, readTokenHash: Data) async throws -> ProjectRef? {
        let rows = try await client.query(
            """
            WITH owner AS (SELECT id, slug, read_token_hash FROM projects WHERE read_token_hash = \(readTokenHash)),
            ended AS (DELETE FROM dashboard_sessions WHERE expires_at < now()),
            started AS (
                INSERT INTO dashboard_sessions (id_hash, project_id, read_token_hash, expires_at)
                SELECT \(idHash), id, read_token_hash, \(expires) FROM owner RETURNING project_id
            )
            SELECT o.id, o.slug FROM owner o JOIN started s ON s.project_id = o.id
            """, logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// The project of an unexpired session whose project still has the read token the
    /// session was started with.
    func dashboardSessionProject(idHash: Data) async throws -> ProjectRef? {
        let rows = try await client.query(
            """
            SELECT p.id, p.slug FROM dashboard_sessions s
            JOIN projects p ON p.id = s.project_id AND p.read_token_hash = s.read_token_hash
            WHERE s.id_hash = \(idHash) AND s.expires_at > now()
            """, logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// Deletes a session.
    func endDashboardSession(idHash: Data) async throws {
        try await client.query("DELETE FROM dashboard_sessions WHERE id_hash = \(idHash)", logger: logger)
    }
}
