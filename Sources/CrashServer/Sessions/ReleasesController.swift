import CrashWire
import Foundation
import Hummingbird
import Logging
import PostgresNIO

/// A release's figures, in the list and at the top of the detail (release-health.md,
/// "Queries"): its counts, the rates computed once from them, and when it was first and last seen.
struct ReleaseFigures: Codable, Sendable, Equatable {
    var version: String
    var sessions: Int64
    var crashedSessions: Int64
    var erroredSessions: Int64
    var abnormalSessions: Int64
    var users: Int64
    var crashedUsers: Int64
    @NullWhenAbsent var crashFreeSessions: Double?
    @NullWhenAbsent var crashFreeUsers: Double?
    @NullWhenAbsent var adoption: Double?
    @NullWhenAbsent var firstSeen: Date?
    @NullWhenAbsent var lastSeen: Date?

    init(_ t: ReleaseTotals, allSessions: Int64, seen: ReleaseSeen?) {
        version = t.version
        sessions = t.sessions
        crashedSessions = t.crashed
        erroredSessions = t.errored
        abnormalSessions = t.abnormal
        users = t.users
        crashedUsers = t.crashedUsers
        crashFreeSessions = t.sessions > 0 ? 1 - Double(t.crashed) / Double(t.sessions) : nil
        crashFreeUsers = t.users > 0 ? 1 - Double(t.crashedUsers) / Double(t.users) : nil
        adoption = allSessions > 0 ? Double(t.sessions) / Double(allSessions) : nil
        firstSeen = seen?.first
        lastSeen = seen?.last
    }
}

struct ReleaseListBody: Codable, Sendable {
    var releases: [ReleaseFigures]
    @NullWhenAbsent var nextCursor: String?
}

/// A release's detail: its figures (as one JSON object with the rest), series, top groups and
/// the groups it introduced. `detail.sessions` and the like read the figures.
@dynamicMemberLookup
struct ReleaseDetailBody: Codable, Sendable {
    var figures: ReleaseFigures
    var series: [ReleaseSeriesPoint]
    var topGroups: [GroupBody]
    var newGroups: [GroupBody]

    private enum CodingKeys: String, CodingKey { case series, topGroups, newGroups }

    init(_ figures: ReleaseFigures, series: [ReleaseSeriesPoint], topGroups: [GroupBody], newGroups: [GroupBody]) {
        self.figures = figures
        self.series = series
        self.topGroups = topGroups
        self.newGroups = newGroups
    }

    subscript<T>(dynamicMember path: KeyPath<ReleaseFigures, T>) -> T { figures[keyPath: path] }

    init(from decoder: any Decoder) throws {
        figures = try ReleaseFigures(from: decoder)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        series = try c.decode([ReleaseSeriesPoint].self, forKey: .series)
        topGroups = try c.decode([GroupBody].self, forKey: .topGroups)
        newGroups = try c.decode([GroupBody].self, forKey: .newGroups)
    }

    func encode(to encoder: any Encoder) throws {
        try figures.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(series, forKey: .series)
        try c.encode(topGroups, forKey: .topGroups)
        try c.encode(newGroups, forKey: .newGroups)
    }
}

extension ReleaseListBody: ResponseEncodable {}
extension ReleaseDetailBody: ResponseEncodable {}

/// The releases list's cursor: the last release listed (its sessions and version) and the
/// window of the first page. base64url JSON, checked field by field (a forged one is a 400).
struct ReleaseCursor: Codable, Sendable, Equatable {
    var sessions: Int64
    var version: String
    var from: Int64
    var to: Int64

    private enum CodingKeys: String, CodingKey { case sessions = "n", version = "v", from = "f", to = "t" }

    func encode() -> String {
        let data = (try? JSONEncoder().encode(self)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: String) throws -> ReleaseCursor {
        let bad = APIError.badRequest("cursor: not a cursor of this list (use nextCursor as returned)")
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        guard text.utf8.count <= 1024, let data = Data(base64Encoded: b64),
            let cursor = try? JSONDecoder().decode(ReleaseCursor.self, from: data),
            cursor.sessions >= 0, !cursor.version.isEmpty, cursor.version.utf8.count <= 256,
            ListCursor.timeRange.contains(cursor.from), ListCursor.timeRange.contains(cursor.to)
        else { throw bad }
        return cursor
    }

    var window: TimeWindow {
        get throws { try TimeWindow.checked(from: ListCursor.date(from), to: ListCursor.date(to), name: "cursor") }
    }
}

/// `GET /v1/projects/{project}/releases` and `.../releases/{version}` (read token).
struct ReleasesController: Sendable {
    let database: CrashDatabase
    let store: any SessionStore

    init(database: CrashDatabase, store: (any SessionStore)? = nil) {
        self.database = database
        self.store = store ?? PostgresSessionStore(database: database)
    }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let project = router.group("/v1/projects/:project").add(
            middleware: ReadAuthenticationMiddleware(store: PostgresProjectStore(database: database)))
        project.get("releases", use: list)
        project.get("releases/:version", use: detail)
    }

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> ReleaseListBody {
        try await listBody(project: context.requireReadProject(), Self.listRequest(QueryParameters(request)))
    }

    @Sendable func detail(request: Request, context: CrashRequestContext) async throws -> ReleaseDetailBody {
        let raw = context.parameters.get("version") ?? ""
        let version = raw.removingPercentEncoding ?? raw
        guard !version.isEmpty, version.utf8.count <= 200 else { throw APIError.badRequest("version: must be 1 to 200 bytes") }
        return try await detailBody(project: context.requireReadProject(), Self.detailRequest(version: version, QueryParameters(request)))
    }

    static func filters(_ q: QueryParameters) throws -> SessionFilters {
        SessionFilters(environment: try q.string("environment"), app: try q.string("app"))
    }

    /// The list's query string as a request: `environment`, `app`, `limit`, `from`/`to` and
    /// `cursor`; a bad value is a 400 naming it.
    static func listRequest(_ q: QueryParameters) throws -> ReleaseListRequest {
        let filters = try filters(q)
        let limit = try q.limit()
        let window = try q.window()
        // Not through `string`'s 256 bytes: a cursor holds a version of up to 200 bytes.
        let cursor = try q.values["cursor"].map(ReleaseCursor.decode)
        return ReleaseListRequest(window: window, filters: filters, limit: limit, cursor: cursor)
    }

    /// The detail's query string as a request: `environment`, `app`, `from`/`to` and
    /// `interval` (hour or day, hour by default); a bad value is a 400 naming it.
    static func detailRequest(version: String, _ q: QueryParameters) throws -> ReleaseDetailRequest {
        let filters = try filters(q)
        let window = try q.window()
        let interval: StatsInterval =
            try q.string("interval").map {
                guard let unit = StatsInterval(rawValue: $0) else { throw APIError.badRequest("interval: must be hour or day") }
                return unit
            } ?? .hour
        return ReleaseDetailRequest(version: version, window: window, filters: filters, interval: interval)
    }

    /// One page of the releases list (the REST list and the dashboard's Releases page).
    func listBody(project: ProjectRef, _ request: ReleaseListRequest) async throws -> ReleaseListBody {
        let window = try request.cursor?.window ?? request.window
        let page = try await store.releasePage(
            project: project.id, window: window, filters: request.filters,
            after: request.cursor.map { ReleaseTotals(version: $0.version, sessions: $0.sessions) }, limit: request.limit)
        return ReleaseListBody(
            releases: page.releases.map { ReleaseFigures($0, allSessions: page.allSessions, seen: page.seen[$0.version]) },
            nextCursor: page.next.map {
                ReleaseCursor(
                    sessions: $0.sessions, version: $0.version, from: ListCursor.micros(window.from), to: ListCursor.micros(window.to)
                ).encode()
            })
    }

    /// Most sessions first; ties: highest version first (numeric dotted), then by text.
    static func before(_ a: ReleaseTotals, _ b: ReleaseTotals) -> Bool { ReleaseTotals.before(a, b) }

    /// One release's detail over the window (the REST detail and the dashboard's release page).
    func detailBody(project: ProjectRef, _ request: ReleaseDetailRequest) async throws -> ReleaseDetailBody {
        let (version, window, filters) = (request.version, request.window, request.filters)
        // The sessions and the crash groups are independent reads: side by side, each on a
        // connection of its own.
        async let sessions = store.releaseDetail(
            project: project.id, version: version, window: window, filters: filters, interval: request.interval)
        async let crashes = groups(project: project, version: version, filters: filters, window: window)
        let (detail, (top, introduced)) = try await (sessions, crashes)
        let release = ReleaseFigures(detail.totals, allSessions: detail.allSessions, seen: detail.seen)
        return ReleaseDetailBody(release, series: detail.series, topGroups: top, newGroups: introduced)
    }

    /// The release's top crash groups in the window, and those it introduced (10 each, most
    /// first), counting the reports of the filters' app and environment (triage.md).
    func groups(
        project: ProjectRef, version: String, filters: SessionFilters, window: TimeWindow
    ) async throws
        -> (top: [GroupBody], introduced: [GroupBody])
    {
        let app = filters.app
        let groupFilters = GroupFilters(app: app, version: version, environments: filters.environment.map { [$0] } ?? [])
        async let top = QueryService(store: PostgresQueryStore(database: database)).groups(
            project, GroupListRequest(window: window, filters: groupFilters, limit: 10)
        ).groups
        async let introduced = QueryService(store: PostgresQueryStore(database: database)).read(project) { reader in
            // Counted from the retention's cut-off on, as every crash read (QueryRetention.swift).
            let since = try await reader.retainedSince(project: project.id, now: Date())
            let counted = window.retained(since: since)
            let ids = try await reader.groupsIntroduced(project: project.id, version: version, app: app, window: counted)
            guard !ids.isEmpty else { return [GroupBody]() }
            let counts = try await reader.windowCounts(
                project: project.id, ids: ids, window: counted, filters: groupFilters, snapshot: nil)
            let ranked = counts.filter { $0.value > 0 }.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
            return try await reader.groupBodies(
                project: project.id, counts: ranked.prefix(10).map { ($0.key, $0.value) }, window: window, filters: groupFilters,
                since: since)
        }
        return try await (top, introduced)
    }
}
