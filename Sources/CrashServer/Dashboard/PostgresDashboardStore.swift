import Foundation
import Logging
import PostgresNIO

/// The dashboard on the server's PostgreSQL: the query service over ``PostgresQueryStore``,
/// and the sessions in `dashboard_sessions`, always on the primary: a session started or
/// ended on one replica counts on every other at its next request, and a standby that lags
/// cannot revive a session that was ended.
struct PostgresDashboardStore: DashboardStore {
    let database: CrashDatabase
    /// The REST releases controller: the pages read what the API answers, through its store.
    let releases: ReleasesController

    private var logger: Logger { database.logger }

    var queries: QueryService<PostgresQueryStore> { QueryService(store: PostgresQueryStore(database: database)) }

    var triage: TriageService<PostgresTriageStore, PostgresQueryStore> {
        TriageService(store: PostgresTriageStore(database: database), queries: queries)
    }

    /// Stores a session for the project whose read token hashes to the token's SHA-256,
    /// bound to that hash, and returns the project (nil when no project has the token).
    /// Sessions past their end are deleted on the way.
    func startSession(_ session: DashboardSessions.Session, expires: Date, readToken: String) async throws -> ProjectRef? {
        let readTokenHash = ProjectKeys.hash(readToken)
        let rows = try await database.client.query(
            """
            WITH owner AS (SELECT id, slug, read_token_hash FROM projects WHERE read_token_hash = \(readTokenHash)),
            ended AS (DELETE FROM dashboard_sessions WHERE expires_at < now()),
            started AS (
                INSERT INTO dashboard_sessions (id_hash, project_id, read_token_hash, expires_at)
                SELECT \(session.idHash), id, read_token_hash, \(expires) FROM owner RETURNING project_id
            )
            SELECT o.id, o.slug FROM owner o JOIN started s ON s.project_id = o.id
            """, logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// The project of an unexpired session whose project still has the read token the
    /// session was started with.
    func project(session: DashboardSessions.Session) async throws -> ProjectRef? {
        let rows = try await database.client.query(
            """
            SELECT p.id, p.slug FROM dashboard_sessions s
            JOIN projects p ON p.id = s.project_id AND p.read_token_hash = s.read_token_hash
            WHERE s.id_hash = \(session.idHash) AND s.expires_at > now()
            """, logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// Deletes a session.
    func endSession(_ session: DashboardSessions.Session) async throws {
        try await database.client.query("DELETE FROM dashboard_sessions WHERE id_hash = \(session.idHash)", logger: logger)
    }
}
