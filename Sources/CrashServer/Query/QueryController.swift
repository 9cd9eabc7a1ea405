import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PostgresNIO

/// The Query section of the contract: crash list, detail, reports, triage and stats, all
/// behind a project's read token (``ReadAuthenticationMiddleware``); plus `GET /openapi.json`.
///
/// Generic over its storage: ``PostgresQueryStore`` in the server, ``InMemoryCrashStore`` in
/// fast route tests.
struct QueryController<Store: QueryStore>: Sendable {
    let store: Store
    /// Adds `symbolicated` frames to the reports and the detail's latest reports.
    var symbolicator: ReportSymbolicator? = nil

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: OpenAPIDocument.json)))
        }
        let project = router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: store))
        project.get("crashes", use: list)
        project.get("crashes/:id", use: detail)
        project.patch("crashes/:id", use: triage)
        project.get("crashes/:id/reports", use: reports)
        project.get("stats", use: stats)
    }

    // MARK: - Handlers

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> GroupListBody {
        try await listBody(project: context.requireReadProject(), QueryParameters(request))
    }

    /// One page of the crash list (the REST list and the dashboard's top crashes).
    func listBody(project: ProjectRef, _ q: QueryParameters) async throws -> GroupListBody {
        let sort = try q.sort()
        let trend: StatsInterval? = try q.string("trend").map {
            guard let unit = StatsInterval(rawValue: $0) else { throw APIError.badRequest("trend: must be hour or day") }
            return unit
        }
        let filters = try q.filters()
        let limit = try q.limit()
        var window = try trend.map { try q.window(series: $0, parameter: "trend") } ?? q.window()
        let cursor = try q.string("cursor").map { try ListCursor.decode($0, order: ListCursor.Order(sort), project: project.id) }
        if let cursorWindow = try cursor?.window {
            window = cursorWindow
            if let trend { try window.checkBuckets(trend, parameter: "trend") }
        }
        let (body, last, snapshot) = try await store.read { reader in
            // The first page's snapshot: current on the first page; after it, the stored one
            // (nil once pruned: the walk goes on over current data).
            var snapshot: String?
            var asOf: String?
            if cursor == nil {
                (snapshot, asOf) = try await reader.firstPageSnapshot()
            } else if let id = cursor?.snapshot {
                snapshot = try await reader.listSnapshot(id)
                asOf = snapshot
            }
            let ranking = GroupRanking(limit: limit, after: cursor.map { ($0.key, $0.groupID) })
            let page: [GroupRanking.Entry]
            switch sort {
            case .count:
                page = try await ranking.byCount(
                    candidates: { after, atLeast, batch in
                        try await reader.countCandidates(
                            project: project.id, window: window, filters: filters, after: after, atLeast: atLeast, limit: batch)
                    },
                    counts: { ids in
                        try await reader.windowCounts(project: project.id, ids: ids, window: window, filters: filters, snapshot: asOf)
                    })
            case .lastSeen, .firstSeen:
                // Under a cursor, keys are those of the first page's snapshot, so groups that
                // got reports since keep their place.
                var placed: [Int64: Int64?] = [:]
                if let asOf { placed = try await reader.timeKeysAsOf(project: project.id, sort: sort, snapshot: asOf) }
                page = try await ranking.byTime(
                    placed: placed,
                    candidates: { after, batch in
                        try await reader.timeCandidates(
                            project: project.id, sort: sort, window: window, filters: filters, after: after, limit: batch)
                    },
                    counts: { ids in
                        try await reader.windowCounts(project: project.id, ids: ids, window: window, filters: filters, snapshot: asOf)
                    })
            }
            let shown = Array(page.prefix(limit))
            var groups = try await reader.groupBodies(
                project: project.id, counts: shown.map { ($0.id, $0.count) }, window: window, filters: filters)
            var truncated: Bool?
            if let trend {
                // The page's trends share one point budget: when they would not all fit, the
                // rows of highest count keep theirs (ties by group id), the others have none.
                let buckets = window.buckets(trend.seconds)
                var totals: [Int64: Int64] = [:]
                for group in groups { if let id = Int64(group.id) { totals[id] = group.count } }
                let kept = PointBudget.top(totals, limit: PointBudget.series(buckets: buckets.count), key: <)
                if kept.count < totals.count { truncated = true }
                let counts = try await reader.groupTrends(
                    project: project.id, ids: groups.compactMap { Int64($0.id) }.filter(kept.contains), window: window, unit: trend,
                    filters: filters)
                for i in groups.indices {
                    guard let id = Int64(groups[i].id), kept.contains(id) else { continue }
                    let series = counts[id] ?? [:]
                    groups[i].trend = buckets.map { TimeCount(t: $0, count: series[$0] ?? 0) }
                }
            }
            return (
                GroupListBody(groups: groups, nextCursor: nil, truncated: truncated), page.count > limit ? shown.last : nil, snapshot
            )
        }
        var list = body
        if let last {
            // Saved after the read transaction (which is read-only), once per walk.
            var snapshotID = cursor?.snapshot
            if cursor == nil, let snapshot { snapshotID = try await store.saveListSnapshot(snapshot) }
            list.nextCursor = ListCursor(
                order: ListCursor.Order(sort), project: project.id, key: last.key, groupID: last.id, from: ListCursor.micros(window.from),
                to: ListCursor.micros(window.to), snapshot: snapshotID
            ).encode()
        }
        return list
    }

    @Sendable func detail(request: Request, context: CrashRequestContext) async throws -> GroupDetailBody {
        let project = try context.requireReadProject()
        let window = try QueryParameters(request).window()
        var body = try await detailBody(project: project, group: try groupID(context), window: window)
        if let symbolicator, !body.latest.isEmpty {
            body.latest = await symbolicator.symbolicateLatest(project: project.id, group: try groupID(context), body.latest)
        }
        return body
    }

    /// A group's detail over `window` (the REST detail and the dashboard's crash page).
    func detailBody(project: ProjectRef, group: Int64, window: TimeWindow) async throws -> GroupDetailBody {
        try await store.read { reader -> GroupDetailBody in
            let histogram = try await reader.groupHistogram(group: group, window: window)
            let count = histogram.values.reduce(0, +)
            guard
                let base = try await reader.groupBodies(
                    project: project.id, counts: [(group, count)], window: window, filters: GroupFilters()
                ).first
            else { throw APIError.notFound("no crash group \(group) in project '\(project.slug)'") }
            let breakdown = try await reader.breakdown(group: group, window: window)
            let points = window.buckets(TimeWindow.hour).map { TimeCount(t: $0, count: histogram[$0] ?? 0) }
            let latest = try await reader.reports(project: project.id, group: group, after: nil, limit: 5, includeStack: false)
            return GroupDetailBody(group: base, breakdown: breakdown, histogram: points, latest: latest.map(\.report))
        }
    }

    @Sendable func reports(request: Request, context: CrashRequestContext) async throws -> ReportListBody {
        let project = try context.requireReadProject()
        let q = QueryParameters(request)
        let limit = try q.limit()
        let group = try groupID(context)
        var after: (Int64, UUID)?
        if let text = try q.string("cursor") {
            let cursor = try ListCursor.decode(text, order: .reports, project: project.id)
            guard cursor.groupID == group, let id = cursor.reportID else {
                throw APIError.badRequest("cursor: not a cursor from this list (use nextCursor as returned)")
            }
            after = (cursor.key, id)
        }
        var body = try await store.read { reader -> ReportListBody in
            guard try await !reader.groupRows(project: project.id, ids: [group]).isEmpty else {
                throw APIError.notFound("no crash group \(group) in project '\(project.slug)'")
            }
            let rows = try await reader.reports(project: project.id, group: group, after: after, limit: limit + 1, includeStack: true)
            var next: String?
            if rows.count > limit {
                let last = rows[limit - 1]
                next = ListCursor(
                    order: .reports, project: project.id, key: last.micros, groupID: group, reportID: UUID(uuidString: last.report.id)
                ).encode()
            }
            return ReportListBody(reports: rows.prefix(limit).map(\.report), nextCursor: next)
        }
        if let symbolicator { body.reports = await symbolicator.symbolicate(project: project.id, body.reports) }
        return body
    }

    @Sendable func triage(request: Request, context: CrashRequestContext) async throws -> GroupBody {
        let project = try context.requireReadProject()
        let group = try groupID(context)
        let change = try await TriageRequest.decode(request, context: context)
        guard try await store.triage(project: project.id, group: group, status: change.status, resolvedIn: change.resolvedIn)
        else { throw APIError.notFound("no crash group \(group) in project '\(project.slug)'") }
        let window = TimeWindow.lastSevenDays()
        return try await store.read { reader -> GroupBody in
            guard let body = try await reader.groupBody(project: project.id, group: group, window: window) else {
                throw APIError.notFound("no crash group \(group)")
            }
            return body
        }
    }

    @Sendable func stats(request: Request, context: CrashRequestContext) async throws -> StatsBody {
        try await statsBody(project: context.requireReadProject(), QueryParameters(request))
    }

    /// Project-wide counts per bucket (the REST stats and the dashboard's overview), within
    /// the point budget (``PointBudget``).
    func statsBody(project: ProjectRef, _ q: QueryParameters) async throws -> StatsBody {
        let interval =
            try q.string("interval").map {
                guard let unit = StatsInterval(rawValue: $0) else { throw APIError.badRequest("interval: must be hour or day") }
                return unit
            } ?? .hour
        let window = try q.window(series: interval, parameter: "interval")
        let groupBy =
            try q.string("groupBy").map {
                guard let grouping = StatsGrouping(rawValue: $0) else {
                    throw APIError.badRequest("groupBy: must be none, kind, version or fatal")
                }
                return grouping
            } ?? .none
        let buckets = window.buckets(interval.seconds)
        let fit = PointBudget.series(buckets: buckets.count)
        let rows = try await store.read { reader in
            groupBy == .fatal
                ? try await reader.fatalStats(project: project.id, window: window, unit: interval)
                : try await reader.stats(project: project.id, window: window, unit: interval, groupBy: groupBy, maxSeries: fit)
        }
        var byKey: [String?: [Date: Int64]] = [:]
        if groupBy == .none { byKey[nil] = [:] }
        if groupBy == .fatal { (byKey["fatal"], byKey["nonFatal"]) = ([:], [:]) }
        for row in rows { byKey[row.key, default: [:]][row.t, default: 0] += row.n }
        // The series of highest total count that fit, ties by key (the store may already have
        // left out some of the others: it returns at most one more than fit).
        let kept = PointBudget.top(byKey.mapValues { $0.values.reduce(0, +) }, limit: fit, key: PointBudget.keyOrder)
        let truncated = kept.count < byKey.count
        byKey = byKey.filter { kept.contains($0.key) }
        var keys = Array(byKey.keys)
        switch groupBy {
        case .fatal:
            keys = ["fatal", "nonFatal"].filter(kept.contains)
        case .version:
            keys.sort { a, b in
                let c = AppVersion.compare(a ?? "", b ?? "")
                return c != 0 ? c > 0 : (a ?? "") > (b ?? "")
            }
        case .none, .kind:
            let totals = byKey.mapValues { $0.values.reduce(0, +) }
            keys.sort { a, b in totals[a]! != totals[b]! ? totals[a]! > totals[b]! : (a ?? "") < (b ?? "") }
        }
        let series = keys.map { key in
            StatsBody.Series(key: key, points: buckets.map { TimeCount(t: $0, count: byKey[key]?[$0] ?? 0) })
        }
        return StatsBody(series: series, truncated: truncated ? true : nil)
    }

    // MARK: - Helpers

    /// The `:id` of a group route; 404 (not 400) for one that cannot be a group id.
    private func groupID(_ context: CrashRequestContext) throws -> Int64 {
        guard let id = try? context.parameters.require("id", as: Int64.self), id > 0 else {
            throw APIError.notFound("no crash group '\(context.parameters.get("id") ?? "")'")
        }
        return id
    }
}

extension GroupBody: ResponseEncodable {}
extension GroupListBody: ResponseEncodable {}
extension GroupDetailBody: ResponseEncodable {}
extension ReportListBody: ResponseEncodable {}
extension StatsBody: ResponseEncodable {}

extension TriageRequest {
    /// Decodes the body through the context's decoder; a body that is not a JSON object is
    /// the contract's 400 (not the framework's wording).
    static func decode(_ request: Request, context: CrashRequestContext) async throws -> TriageRequest {
        do {
            return try await request.decode(as: TriageRequest.self, context: context)
        } catch let error as HTTPError where error.status == .badRequest {
            throw APIError.badRequest("status: body must be a JSON object like {\"status\": \"resolved\", \"resolvedIn\": \"1.4.0\"}")
        }
    }
}
