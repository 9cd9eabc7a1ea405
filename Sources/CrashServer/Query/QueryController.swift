import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The Query section of the contract: crash list, detail, reports and stats, all
/// behind a project's read token (``ReadAuthenticationMiddleware``); plus `GET /openapi.json`.
///
/// Thin: each handler parses the request into a typed request (400s naming the parameter)
/// and asks ``QueryService``, which the dashboard and `crash-server top` share.
struct QueryController<Store: QueryStore>: Sendable {
    let queries: QueryService<Store>

    init(store: Store, symbolicator: ReportSymbolicator? = nil) {
        queries = QueryService(store: store, symbolicator: symbolicator)
    }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        router.get("/openapi.json") { _, _ in JSONResponse.ok(ByteBuffer(string: OpenAPIDocument.json)) }
        let project = router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: queries.store))
        project.get("crashes", use: list)
        project.get("crashes/:id", use: detail)
        project.get("crashes/:id/reports", use: reports)
        project.get("stats", use: stats)
    }

    // MARK: - Handlers

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> GroupListBody {
        let project = try context.requireReadProject()
        return try await queries.groups(project, GroupListRequest(QueryParameters(request), project: project))
    }

    @Sendable func detail(request: Request, context: CrashRequestContext) async throws -> GroupDetailBody {
        let q = QueryParameters(request)
        let window = try q.window()
        let detail = GroupDetailRequest(group: try context.groupID(), window: window, environments: try q.environments())
        return try await queries.group(context.requireReadProject(), detail)
    }

    @Sendable func reports(request: Request, context: CrashRequestContext) async throws -> ReportListBody {
        let project = try context.requireReadProject()
        let q = QueryParameters(request)
        let limit = try q.limit()
        let list = ReportListRequest(
            group: try context.groupID(), limit: limit,
            cursor: try q.string("cursor").map { try ListCursor.decode($0, order: .reports, project: project.id) },
            environments: try q.environments())
        return try await queries.reports(project, list)
    }

    @Sendable func stats(request: Request, context: CrashRequestContext) async throws -> StatsBody {
        try await queries.stats(context.requireReadProject(), StatsRequest(QueryParameters(request)))
    }

    // MARK: - Helpers

}

extension GroupListRequest {
    /// The list's query string: `from`, `to`, the filters (with `environment` and the search
    /// `q`), `sort`, `limit`, `cursor` (bound to `project` and the sort) and `trend`; each
    /// mistake a 400 naming the parameter. Bulk triage parses the same string the same way.
    init(_ q: QueryParameters, project: ProjectRef) throws {
        let sort = try q.sort()
        let trend: StatsInterval? = try q.string("trend").map {
            guard let unit = StatsInterval(rawValue: $0) else { throw APIError.badRequest("trend: must be hour or day") }
            return unit
        }
        let filters = try q.filters()
        let limit = try q.limit()
        let window = try trend.map { try q.window(series: $0, parameter: "trend") } ?? q.window()
        let cursor = try q.string("cursor").map { try ListCursor.decode($0, order: ListCursor.Order(sort), project: project.id) }
        self.init(window: window, filters: filters, sort: sort, limit: limit, cursor: cursor, trend: trend)
    }
}

extension StatsRequest {
    /// The stats' query string: `from`, `to`, `interval` and `groupBy`; each mistake a 400
    /// naming the parameter (too many buckets for one answer names `interval`).
    init(_ q: QueryParameters) throws {
        let interval =
            try q.string("interval").map {
                guard let unit = StatsInterval(rawValue: $0) else { throw APIError.badRequest("interval: must be hour or day") }
                return unit
            } ?? .hour
        let window = try q.window(series: interval, parameter: "interval")
        let groupBy =
            try q.string("groupBy").map {
                guard let grouping = StatsGrouping(rawValue: $0) else {
                    throw APIError.badRequest("groupBy: must be none, kind, version, fatal or environment")
                }
                return grouping
            } ?? .none
        self.init(window: window, interval: interval, groupBy: groupBy, environments: try q.environments())
    }
}

extension GroupBody: ResponseEncodable {}
extension GroupListBody: ResponseEncodable {}
extension GroupDetailBody: ResponseEncodable {}
extension ReportListBody: ResponseEncodable {}
extension StatsBody: ResponseEncodable {}
