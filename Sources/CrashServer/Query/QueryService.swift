import CrashWire
import Foundation

/// The queries of the contract's Query section, over typed requests: the crash list with its
/// ranking, snapshot and cursors, a group's detail and reports, and the stats (triage: ``TriageService``).
///
/// One service for every reader: the REST routes (``QueryController``), the dashboard and
/// `crash-server top` call the same functions, so a page, a terminal table and
/// `GET /v1/...` never disagree. Generic over its storage: ``PostgresQueryStore`` in the
/// server, `InMemoryCrashStore` in fast route tests.
struct QueryService<Store: QueryStore>: Sendable {
    let store: Store
    /// Adds `symbolicated` frames to the reports and the detail's latest reports.
    var symbolicator: ReportSymbolicator? = nil
    /// The time the retention's cut-off is taken at (``QueryReader/retainedSince(project:now:)``):
    /// every read counts only the reports the project still keeps.
    var now: @Sendable () -> Date = { Date() }

    /// `body` over one read snapshot, taken once the rollups hold every report of `project`
    /// committed before the call (read-your-writes: ``QueryStore/awaitRollups(project:)``). Every
    /// read of the rollups goes through it; the reports list, which reads reports alone, does not.
    func read<T: Sendable>(_ project: ProjectRef, _ body: @escaping @Sendable (Store.Reader) async throws -> T) async throws -> T {
        try await store.awaitRollups(project: project.id)
        return try await store.read(body)
    }

    /// One page of the crash list.
    ///
    /// The first page's database snapshot is saved for its cursors, and later pages count as
    /// of it: time-sorted walks under concurrent ingest list every group that existed when
    /// the walk started exactly once (contract, "Cursors").
    func groups(_ project: ProjectRef, _ request: GroupListRequest) async throws -> GroupListBody {
        let (sort, filters, limit, trend, cursor) = (request.sort, request.filters, request.limit, request.trend, request.cursor)
        var window = request.window
        if let cursorWindow = try cursor?.window {
            window = cursorWindow
            if let trend { try window.checkBuckets(trend, parameter: "trend") }
        }
        let (body, last, snapshot) = try await read(project) { [window] reader in
            // Counted from the retention's cut-off on; trends keep the asked buckets (zero before it).
            let since = try await reader.retainedSince(project: project.id, now: now())
            let counted = window.retained(since: since)
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
            let counts: ([Int64]?) async throws -> [Int64: Int64] = { ids in
                try await reader.windowCounts(project: project.id, ids: ids, window: counted, filters: filters, snapshot: asOf)
            }
            let page: [GroupRanking.Entry]
            switch sort {
            case .count:
                page = try await ranking.byCount(reader, project: project.id, window: counted, filters: filters, counts: counts)
            case .lastSeen, .firstSeen:
                // Under a cursor, keys are those of the first page's snapshot, so groups that
                // got reports since keep their place.
                var placed: [Int64: Int64?] = [:]
                if let asOf { placed = try await reader.timeKeysAsOf(project: project.id, sort: sort, snapshot: asOf) }
                page = try await ranking.byTime(
                    placed: placed,
                    candidates: { after, batch in
                        try await reader.timeCandidates(
                            project: project.id, sort: sort, window: counted, filters: filters, after: after, limit: batch)
                    },
                    counts: { ids in try await counts(ids) })
            }
            let shown = Array(page.prefix(limit))
            var groups = try await reader.groupBodies(
                project: project.id, counts: shown.map { ($0.id, $0.count) }, window: window, filters: filters, since: since)
            var truncated: Bool?
            if let trend {
                // The page's trends share one point budget: when they would not all fit, the
                // rows of highest count keep theirs (ties by group id), the others have none.
                let buckets = window.buckets(trend.seconds)
                var totals: [Int64: Int64] = [:]
                for group in groups { if let id = Int64(group.id) { totals[id] = group.count } }
                let kept = PointBudget.top(totals, limit: PointBudget.series(buckets: buckets.count), key: <)
                if kept.count < totals.count { truncated = true }
                let series = try await reader.groupTrends(
                    project: project.id, ids: groups.compactMap { Int64($0.id) }.filter(kept.contains), window: counted, unit: trend,
                    filters: filters)
                for i in groups.indices {
                    guard let id = Int64(groups[i].id), kept.contains(id) else { continue }
                    let points = series[id] ?? [:]
                    groups[i].trend = buckets.map { TimeCount(t: $0, count: points[$0] ?? 0) }
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

    /// The first page of `request` by count as the groups' stored rows, in the list's order:
    /// the ranking alone, without the rows' devices, versions or trends (the dashboard's merge
    /// choices show an id and a title). Counted on current data; a cursor or another sort is
    /// not read.
    func rankedRows(_ project: ProjectRef, _ request: GroupListRequest) async throws -> [GroupRow] {
        try await read(project) { reader in
            let since = try await reader.retainedSince(project: project.id, now: now())
            let (window, filters) = (request.window.retained(since: since), request.filters)
            let page = try await GroupRanking(limit: request.limit, after: nil).byCount(
                reader, project: project.id, window: window, filters: filters,
                counts: { ids in try await reader.windowCounts(project: project.id, ids: ids, window: window, filters: filters, snapshot: nil) })
            let shown = page.prefix(request.limit).map(\.id)
            let rows = try await reader.groupRows(project: project.id, ids: shown)
            return shown.compactMap { rows[$0] }
        }
    }

    /// A group's detail over the request's window, its latest reports symbolicated when a
    /// symbolicator is set; 404 for a group the project does not have.
    func group(_ project: ProjectRef, _ request: GroupDetailRequest) async throws -> GroupDetailBody {
        let (group, window, environments) = (request.group, request.window, request.environments)
        var body = try await read(project) { reader -> GroupDetailBody in
            let since = try await reader.retainedSince(project: project.id, now: now())
            let counted = window.retained(since: since)
            let histogram = try await reader.groupHistogram(group: group, window: counted, environments: environments)
            let count = histogram.values.reduce(0, +)
            // A group whose reports are all past retention is gone, as after an erasure.
            guard
                let base = try await reader.groupBodies(
                    project: project.id, counts: [(group, count)], window: window, filters: GroupFilters(environments: environments),
                    since: since
                ).first, base.lastSeen >= since
            else { throw APIError.noCrashGroup(group, in: project) }
            let breakdown = try await reader.breakdown(group: group, window: counted, environments: environments)
            let points = window.buckets(TimeWindow.hour).map { TimeCount(t: $0, count: histogram[$0] ?? 0) }
            let latest = try await reader.reports(
                project: project.id, group: group, after: nil, limit: 5, includeStack: false, environments: environments)
            return GroupDetailBody(
                group: base, breakdown: breakdown, histogram: points, latest: latest.prefix { $0.report.timestamp >= since }.map(\.report))
        }
        if let symbolicator, !body.latest.isEmpty {
            body.latest = await symbolicator.symbolicateLatest(project: project.id, group: group, body.latest)
        }
        return body
    }

    /// A page of a group's stored reports (stacks included, symbolicated when a symbolicator is
    /// set); 404 for a group the project does not have, 400 for a cursor of another list.
    func reports(_ project: ProjectRef, _ request: ReportListRequest) async throws -> ReportListBody {
        let (group, limit) = (request.group, request.limit)
        var after: (Int64, UUID)?
        if let cursor = request.cursor {
            guard cursor.order == .reports, cursor.groupID == group, let id = cursor.reportID else {
                throw APIError.badRequest("cursor: not a cursor from this list (use nextCursor as returned)")
            }
            after = (cursor.key, id)
        }
        var body = try await store.read { [after] reader -> ReportListBody in
            let since = try await reader.retainedSince(project: project.id, now: now())
            guard let row = try await reader.groupRows(project: project.id, ids: [group])[group], row.lastSeen >= since else {
                throw APIError.noCrashGroup(group, in: project)
            }
            // Newest first: the page ends at the first report past retention.
            let rows = try await reader.reports(
                project: project.id, group: group, after: after, limit: limit + 1, includeStack: true, environments: request.environments
            ).prefix { $0.report.timestamp >= since }
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

    /// The environments the project has reports in (the dashboard's environment selector),
    /// of the reports its retention keeps.
    func environments(_ project: ProjectRef) async throws -> [String] {
        try await read(project) { reader in
            try await reader.environments(project: project.id, since: try await reader.retainedSince(project: project.id, now: now()))
        }
    }

    /// Project-wide counts per bucket, within the point budget (``PointBudget``).
    func stats(_ project: ProjectRef, _ request: StatsRequest) async throws -> StatsBody {
        let (window, interval, groupBy) = (request.window, request.interval, request.groupBy)
        let buckets = window.buckets(interval.seconds)
        let fit = PointBudget.series(buckets: buckets.count)
        let rows = try await read(project) { reader in
            // Counted from the retention's cut-off on; the buckets before it are zero.
            let counted = window.retained(since: try await reader.retainedSince(project: project.id, now: now()))
            return groupBy == .fatal
                ? try await reader.fatalStats(project: project.id, window: counted, unit: interval, environments: request.environments)
                : try await reader.stats(
                    project: project.id, window: counted, unit: interval, groupBy: groupBy, maxSeries: fit,
                    environments: request.environments)
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
        case .none, .kind, .environment:
            let totals = byKey.mapValues { $0.values.reduce(0, +) }
            keys.sort { a, b in totals[a]! != totals[b]! ? totals[a]! > totals[b]! : (a ?? "") < (b ?? "") }
        }
        let series = keys.map { key in
            StatsBody.Series(key: key, points: buckets.map { TimeCount(t: $0, count: byKey[key]?[$0] ?? 0) })
        }
        return StatsBody(series: series, truncated: truncated ? true : nil)
    }
}

extension GroupRanking {
    /// ``byCount(candidates:counts:)`` over `reader`'s groups by their count's upper bound in `window`.
    func byCount<Reader: QueryReader>(
        _ reader: Reader, project: Int64, window: TimeWindow, filters: GroupFilters, counts: ([Int64]?) async throws -> [Int64: Int64]
    ) async throws -> [Entry] {
        try await byCount(
            candidates: { after, atLeast, batch in
                try await reader.countCandidates(project: project, window: window, filters: filters, after: after, atLeast: atLeast, limit: batch)
            },
            counts: counts)
    }
}
