import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PostgresNIO

/// The Query section of the contract: crash list, detail, reports, triage and stats, all
/// behind a project's read token; plus `GET /openapi.json`.
struct QueryController: Sendable {
    let database: CrashDatabase
    /// Adds `symbolicated` frames to the reports and the detail's latest reports.
    var symbolicator: ReportSymbolicator? = nil

    func addRoutes(to router: Router<CrashRequestContext>) {
        router.get("/openapi.json") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: OpenAPIDocument.json)))
        }
        let project = router.group("/v1/projects/:project")
        project.get("crashes", use: list)
        project.get("crashes/:id", use: detail)
        project.patch("crashes/:id", use: triage)
        project.get("crashes/:id/reports", use: reports)
        project.get("stats", use: stats)
    }

    // MARK: - Handlers

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await authorize(request, context)
        return try Self.json(try await listBody(project: project, QueryParameters(request)))
    }

    /// One page of the crash list (the REST list and the dashboard's top crashes).
    func listBody(project: ProjectRef, _ q: QueryParameters) async throws -> GroupListBody {
        let sort = try q.sort()
        let trend = try q.string("trend")
        guard trend == nil || trend == "hour" || trend == "day" else { throw APIError.badRequest("trend: must be hour or day") }
        let filters = try q.filters()
        let limit = try q.limit()
        var window = try q.window()
        let cursor = try q.string("cursor").map { try ListCursor.decode($0, order: ListCursor.Order(sort)) }
        if let cursorWindow = try cursor?.window { window = cursorWindow }
        let (body, last, snapshot) = try await database.withReadSnapshot { connection in
            // The first page's snapshot: current on the first page; after it, the stored one
            // (nil once pruned: the walk goes on over current data).
            var snapshot: String?
            if cursor == nil {
                snapshot = try await database.currentSnapshot(on: connection)
            } else if let id = cursor?.snapshot {
                snapshot = try await database.listSnapshot(id, on: connection)
            }
            let asOf = cursor == nil ? nil : snapshot
            let page: [(id: Int64, count: Int64, key: Int64)]
            switch sort {
            case .count:
                page = try await rankByCount(
                    project: project.id, window: window, filters: filters, after: cursor.map { ($0.key, $0.groupID) },
                    snapshot: asOf, limit: limit, connection
                ).map { ($0.id, $0.n, $0.n) }
            case .lastSeen, .firstSeen:
                page = try await rankByTime(
                    project: project.id, sort: sort, window: window, filters: filters,
                    after: cursor.map { ($0.key, $0.groupID) }, snapshot: asOf, limit: limit, connection)
            }
            let shown = Array(page.prefix(limit))
            var groups = try await groupBodies(
                project: project.id, counts: shown.map { ($0.id, $0.count) }, window: window, filters: filters, connection)
            if let trend {
                let unit = trend == "hour" ? TimeWindow.hour : TimeWindow.day
                let counts = try await database.groupTrends(
                    project: project.id, ids: groups.compactMap { Int64($0.id) }, window: window, unit: trend,
                    filters: filters, on: connection)
                let buckets = window.buckets(unit)
                for i in groups.indices {
                    let series = Int64(groups[i].id).flatMap { counts[$0] } ?? [:]
                    groups[i].trend = buckets.map { TimeCount(t: $0, count: series[$0] ?? 0) }
                }
            }
            return (GroupListBody(groups: groups, nextCursor: nil), page.count > limit ? shown.last : nil, snapshot)
        }
        var list = body
        if let last {
            // Saved after the read transaction (which is read-only), once per walk.
            var snapshotID = cursor?.snapshot
            if cursor == nil, let snapshot { snapshotID = try await database.saveListSnapshot(snapshot) }
            list.nextCursor = ListCursor(
                order: ListCursor.Order(sort), key: last.key, groupID: last.id, from: ListCursor.micros(window.from),
                to: ListCursor.micros(window.to), snapshot: snapshotID
            ).encode()
        }
        return list
    }

    @Sendable func detail(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await authorize(request, context)
        let window = try QueryParameters(request).window()
        var body = try await detailBody(project: project, group: try groupID(context), window: window)
        if let symbolicator, !body.latest.isEmpty {
            body.latest = await symbolicator.symbolicateLatest(project: project.id, group: try groupID(context), body.latest)
        }
        return try Self.json(body)
    }

    /// A group's detail over `window` (the REST detail and the dashboard's crash page).
    func detailBody(project: ProjectRef, group: Int64, window: TimeWindow) async throws -> GroupDetailBody {
        try await database.withReadSnapshot { connection -> GroupDetailBody in
            let histogram = try await database.groupHistogram(group: group, window: window, on: connection)
            let count = histogram.values.reduce(0, +)
            guard
                let base = try await groupBodies(
                    project: project.id, counts: [(group, count)], window: window, filters: GroupFilters(), connection
                ).first
            else { throw APIError.notFound("no crash group \(group) in project '\(project.slug)'") }
            let breakdown = try await database.breakdown(group: group, window: window, on: connection)
            let points = window.buckets(TimeWindow.hour).map { TimeCount(t: $0, count: histogram[$0] ?? 0) }
            let latest = try await database.reports(
                project: project.id, group: group, after: nil, limit: 5, includeStack: false, on: connection)
            return GroupDetailBody(group: base, breakdown: breakdown, histogram: points, latest: latest.map(\.report))
        }
    }

    @Sendable func reports(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await authorize(request, context)
        let q = QueryParameters(request)
        let limit = try q.limit()
        let group = try groupID(context)
        var after: (Int64, UUID)?
        if let text = try q.string("cursor") {
            let cursor = try ListCursor.decode(text, order: .reports)
            guard cursor.groupID == group, let id = cursor.reportID else {
                throw APIError.badRequest("cursor: not a cursor from this list (use nextCursor as returned)")
            }
            after = (cursor.key, id)
        }
        var body = try await database.withReadSnapshot { connection -> ReportListBody in
            guard try await !database.groupRows(project: project.id, ids: [group], on: connection).isEmpty else {
                throw APIError.notFound("no crash group \(group) in project '\(project.slug)'")
            }
            let rows = try await database.reports(
                project: project.id, group: group, after: after, limit: limit + 1, includeStack: true, on: connection)
            var next: String?
            if rows.count > limit {
                let last = rows[limit - 1]
                next = ListCursor(order: .reports, key: last.micros, groupID: group, reportID: UUID(uuidString: last.report.id)).encode()
            }
            return ReportListBody(reports: rows.prefix(limit).map(\.report), nextCursor: next)
        }
        if let symbolicator { body.reports = await symbolicator.symbolicate(project: project.id, body.reports) }
        return try Self.json(body)
    }

    @Sendable func triage(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await authorize(request, context)
        let group = try groupID(context)
        let bytes = Array(buffer: try await request.body.collect(upTo: 64 * 1024))
        let change = try TriageRequest.parse(bytes)
        guard try await database.triage(project: project.id, group: group, status: change.status, resolvedIn: change.resolvedIn)
        else { throw APIError.notFound("no crash group \(group) in project '\(project.slug)'") }
        let window = TimeWindow.lastSevenDays()
        let body = try await database.withReadSnapshot { connection -> GroupBody in
            let histogram = try await database.groupHistogram(group: group, window: window, on: connection)
            let bodies = try await groupBodies(
                project: project.id, counts: [(group, histogram.values.reduce(0, +))], window: window,
                filters: GroupFilters(), connection)
            guard let body = bodies.first else { throw APIError.notFound("no crash group \(group)") }
            return body
        }
        return try Self.json(body)
    }

    @Sendable func stats(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try await authorize(request, context)
        return try Self.json(try await statsBody(project: project, QueryParameters(request)))
    }

    /// Project-wide counts per bucket (the REST stats and the dashboard's overview).
    func statsBody(project: ProjectRef, _ q: QueryParameters) async throws -> StatsBody {
        let window = try q.window()
        let interval = try q.string("interval") ?? "hour"
        guard interval == "hour" || interval == "day" else { throw APIError.badRequest("interval: must be hour or day") }
        let groupBy = try q.string("groupBy") ?? "none"
        guard ["none", "kind", "version", "fatal"].contains(groupBy) else {
            throw APIError.badRequest("groupBy: must be none, kind, version or fatal")
        }
        let unit = interval == "hour" ? TimeWindow.hour : TimeWindow.day
        let buckets = window.buckets(unit)
        guard buckets.count <= 10_000 else { throw APIError.badRequest("interval: over 10000 points; use day or a shorter window") }
        let rows = try await database.withReadSnapshot { connection in
            groupBy == "fatal"
                ? try await database.fatalStats(project: project.id, window: window, unit: interval, on: connection)
                : try await database.stats(project: project.id, window: window, unit: interval, groupBy: groupBy, on: connection)
        }
        var byKey: [String?: [Date: Int64]] = [:]
        if groupBy == "none" { byKey[nil] = [:] }
        if groupBy == "fatal" { (byKey["fatal"], byKey["nonFatal"]) = ([:], [:]) }
        for row in rows { byKey[row.key, default: [:]][row.t, default: 0] += row.n }
        var keys = Array(byKey.keys)
        if groupBy == "fatal" {
            keys = ["fatal", "nonFatal"]
        } else if groupBy == "version" {
            keys.sort { a, b in
                let c = AppVersion.compare(a ?? "", b ?? "")
                return c != 0 ? c > 0 : (a ?? "") > (b ?? "")
            }
        } else {
            let totals = byKey.mapValues { $0.values.reduce(0, +) }
            keys.sort { a, b in totals[a]! != totals[b]! ? totals[a]! > totals[b]! : (a ?? "") < (b ?? "") }
        }
        let series = keys.map { key in
            StatsBody.Series(key: key, points: buckets.map { TimeCount(t: $0, count: byKey[key]?[$0] ?? 0) })
        }
        return StatsBody(series: series)
    }

    // MARK: - Ranking

    /// The page after `after` (count, id) by window count descending, ties by id: a
    /// threshold walk over groups in order of an upper bound of their count (all-time
    /// counts), stopping once no unseen group can outrank the page. Returns up to
    /// `limit + 1` entries (the extra one says there is a next page).
    func rankByCount(
        project: Int64, window: TimeWindow, filters: GroupFilters, after: (Int64, Int64)?, snapshot: String?, limit: Int,
        _ connection: PostgresConnection
    ) async throws -> [(id: Int64, n: Int64)] {
        func eligible(_ id: Int64, _ n: Int64) -> Bool {
            guard let (cn, cid) = after else { return true }
            return n < cn || (n == cn && id > cid)
        }
        func ranked(_ counts: [Int64: Int64]) -> [(id: Int64, n: Int64)] {
            counts.filter { eligible($0.key, $0.value) }.map { (id: $0.key, n: $0.value) }
                .sorted { $0.n != $1.n ? $0.n > $1.n : $0.id < $1.id }
        }
        var best: [(id: Int64, n: Int64)] = []
        var position: (bound: Int64, id: Int64)?
        var batch = max(600, 12 * (limit + 1))
        var scanned = 0
        while true {
            if scanned >= 5_000 {
                // The bounds are loose for this query: aggregate every group instead.
                let all = try await database.windowCounts(
                    project: project, ids: nil, window: window, filters: filters, snapshot: snapshot, on: connection)
                return Array(ranked(all).prefix(limit + 1))
            }
            let candidates = try await database.countCandidates(
                project: project, window: window, filters: filters, after: position, limit: batch, on: connection)
            guard let last = candidates.last else { break }
            scanned += candidates.count
            let counts = try await database.windowCounts(
                project: project, ids: candidates.map(\.id), window: window, filters: filters, snapshot: snapshot,
                on: connection)
            best = Array((best + ranked(counts)).sorted { $0.n != $1.n ? $0.n > $1.n : $0.id < $1.id }.prefix(limit + 1))
            position = (last.bound, last.id)
            if candidates.count < batch { break }
            if best.count == limit + 1, best[limit].n > last.bound { break }
            batch = min(batch * 2, 3_200)
        }
        return best
    }

    /// The page after `after` (time in microseconds, id) by lastSeen or firstSeen
    /// descending, ties by id; only groups with reports in the window and filters.
    func rankByTime(
        project: Int64, sort: GroupSort, window: TimeWindow, filters: GroupFilters, after: (Int64, Int64)?,
        snapshot: String?, limit: Int, _ connection: PostgresConnection
    ) async throws -> [(id: Int64, count: Int64, key: Int64)] {
        func before(_ a: (id: Int64, count: Int64, key: Int64), _ b: (id: Int64, count: Int64, key: Int64)) -> Bool {
            a.key != b.key ? a.key > b.key : a.id < b.id
        }
        var found: [(id: Int64, count: Int64, key: Int64)] = []
        var position = after
        let batch = max(100, 2 * (limit + 1))
        // Under a cursor, keys are those of the first page's snapshot, so groups that got
        // reports since keep their place: those groups are placed by their snapshot key,
        // and the walk over current keys skips them.
        var moved: [Int64: Int64?] = [:]
        if let snapshot {
            moved = try await database.timeKeysAsOf(project: project, sort: sort, snapshot: snapshot, on: connection)
            let placed = moved.compactMap { id, key in key.map { (id: id, key: $0) } }
            if !placed.isEmpty {
                let counts = try await database.windowCounts(
                    project: project, ids: placed.map(\.id), window: window, filters: filters, snapshot: snapshot,
                    on: connection)
                for entry in placed {
                    guard let n = counts[entry.id] else { continue }
                    let item = (id: entry.id, count: n, key: entry.key)
                    if let (k, i) = after, !before((i, 0, k), item) { continue }
                    found.append(item)
                }
            }
        }
        while true {
            let candidates = try await database.timeCandidates(
                project: project, sort: sort, window: window, filters: filters, after: position, limit: batch, on: connection)
            guard let last = candidates.last else { break }
            let counts = try await database.windowCounts(
                project: project, ids: candidates.map(\.id), window: window, filters: filters, snapshot: snapshot,
                on: connection)
            for candidate in candidates where moved[candidate.id] == nil {
                guard let n = counts[candidate.id] else { continue }
                let entry = (id: candidate.id, count: n, key: candidate.key)
                if let (k, i) = after, !before((i, 0, k), entry) { continue }
                found.append(entry)
            }
            found.sort(by: before)
            if found.count > limit { found = Array(found.prefix(limit + 1)) }
            position = (last.key, last.id)
            if candidates.count < batch { break }
            // Groups not walked yet keep their current key, at most the last one's.
            if found.count > limit, found[limit].key > last.key { break }
        }
        found.sort(by: before)
        return Array(found.prefix(limit + 1))
    }

    /// The response bodies of `counts` groups (in that order), with devices and versions.
    func groupBodies(
        project: Int64, counts: [(Int64, Int64)], window: TimeWindow, filters: GroupFilters, _ connection: PostgresConnection
    ) async throws -> [GroupBody] {
        guard !counts.isEmpty else { return [] }
        let ids = counts.map(\.0)
        let rows = try await database.groupRows(project: project, ids: ids, on: connection)
        let versions = try await database.versions(ids: ids, on: connection)
        let devices = try await database.deviceCounts(
            project: project, counts: Dictionary(counts, uniquingKeysWith: max), window: window, filters: filters, on: connection)
        return counts.compactMap { id, count in
            guard let row = rows[id] else { return nil }
            return GroupBody(
                id: String(id), signature: row.signature, kind: row.kind, groupingVersion: row.groupingVersion,
                title: row.title, count: count,
                devices: devices[id] ?? 0, firstSeen: row.firstSeen, lastSeen: row.lastSeen, status: row.status,
                resolvedIn: row.resolvedIn, fatal: row.fatal, versions: versions[id] ?? [])
        }
    }

    // MARK: - Helpers

    private func authorize(_ request: Request, _ context: CrashRequestContext) async throws -> ProjectRef {
        let slug = context.parameters.get("project") ?? ""
        return try await database.authorizeRead(request, slug: slug)
    }

    private func groupID(_ context: CrashRequestContext) throws -> Int64 {
        let text = context.parameters.get("id") ?? ""
        guard let id = Int64(text), id > 0 else { throw APIError.notFound("no crash group '\(text)'") }
        return id
    }

    static func json(_ value: some Encodable) throws -> Response {
        let data = try JSONEncoder.crashWire().encode(value)
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
