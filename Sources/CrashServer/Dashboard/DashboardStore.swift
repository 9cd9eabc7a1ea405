import Foundation
import NIOCore
import PostgresNIO

/// What the dashboard reads and writes: the narrow seam between its pages and the storage.
///
/// The list, detail, reports and stats come from the same functions the REST query API
/// answers with, so a page and `GET /v1/...` never disagree.
protocol DashboardStore: Sendable {
    /// The project a read token belongs to, with the token's hash (sign-in).
    func project(readToken: String) async throws -> ProjectRef?
    /// A project and its current read-token hash, by slug (session check).
    func project(slug: String) async throws -> (ProjectRef, tokenHash: Data)?
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
    var queries: QueryController<CrashDatabase> { QueryController(store: database) }

    func project(readToken: String) async throws -> ProjectRef? {
        try await database.project(readToken: readToken)
    }

    func project(slug: String) async throws -> (ProjectRef, tokenHash: Data)? {
        try await database.projectTokenHash(slug: slug)
    }

    func crashes(_ project: ProjectRef, _ parameters: [String: String]) async throws -> GroupListBody {
        try await queries.listBody(project: project, QueryParameters(parameters))
    }

    func crash(_ project: ProjectRef, id: Int64, window: TimeWindow) async throws -> GroupDetailBody {
        try await queries.detailBody(project: project, group: id, window: window)
    }

    func reports(_ project: ProjectRef, id: Int64, limit: Int) async throws -> [StoredReport] {
        try await database.withReadSnapshot { connection in
            try await database.reports(project: project.id, group: id, after: nil, limit: limit, includeStack: true, on: connection)
                .map(\.report)
        }
    }

    func stats(_ project: ProjectRef, _ parameters: [String: String]) async throws -> StatsBody {
        try await queries.statsBody(project: project, QueryParameters(parameters))
    }

    func triage(_ project: ProjectRef, id: Int64, status: GroupStatus, resolvedIn: String?) async throws -> Bool {
        try await database.triage(project: project.id, group: id, status: status, resolvedIn: resolvedIn)
    }
}

extension CrashDatabase {
    /// A project and its read token's SHA-256, by slug.
    func projectTokenHash(slug: String) async throws -> (ProjectRef, tokenHash: Data)? {
        let rows = try await client.query("SELECT id, slug, read_token_hash FROM projects WHERE slug = \(slug)", logger: logger)
        for try await (id, slug, hash) in rows.decode((Int64, String, ByteBuffer).self) {
            return (ProjectRef(id: id, slug: slug), Data(hash.readableBytesView))
        }
        return nil
    }
}
