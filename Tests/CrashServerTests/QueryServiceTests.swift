import CrashWire
import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The query side's shared pieces without PostgreSQL: the SQL predicates written once, the
/// named pieces of a time plan, and the typed requests the dashboard and `crash-server top`
/// hand to ``QueryService``.
@Suite struct QueryServiceTests {
    static func date(_ text: String) -> Date { RFC3339.parse(text)! }

    @Test func reportFilterKeepsEachValueABind() throws {
        var filters = GroupFilters(app: "com.example'; DROP TABLE reports; --", version: "1.0", os: nil)
        filters.search = try SearchQuery.parse("screen:\"x'; --\" !environment:staging")
        let rollup: PostgresQuery = "WHERE \(reportFilter: filters)"
        #expect(!rollup.sql.contains("DROP") && !rollup.sql.contains("staging") && !rollup.sql.contains("fatal"))
        #expect(rollup.sql.hasPrefix("WHERE (app_id = ALL($1::text[]) AND app_version = ALL($2::text[])"))
        #expect(rollup.binds.count == 10)
        let raw: PostgresQuery = "\(reportFilter: filters, onReports: true)"
        #expect(raw.sql.contains("COALESCE(os, '') = ALL($4::text[])"))
        #expect(raw.sql.contains("COALESCE(context, context_jsonb::text)::jsonb ->> c.k"))
        #expect(!raw.sql.contains("x'"))
        #expect(raw.binds.count == 16)
    }

    @Test func sessionFilterKeepsEachValueABind() {
        let query: PostgresQuery = "AND \(sessionFilter: SessionFilters(environment: "production", app: nil))"
        #expect(query.sql == "AND ($1::text IS NULL OR environment = $2) AND ($3::text IS NULL OR app_id = $4)")
        #expect(query.binds.count == 4)
    }

    @Test func groupFilterHidesIgnoredGroupsUnlessAStatusIsAsked() throws {
        let query: PostgresQuery = "\(groupFilter: GroupFilters(kind: .kvo, status: .regressed), alias: "g")"
        #expect(query.sql.hasPrefix("($1::text IS NULL OR g.kind = $2)\n  AND g.merged_into IS NULL AND CASE WHEN $3::text IS NULL THEN $4 OR "))
        #expect(query.binds.count == 5)
        var filters = GroupFilters()
        #expect(!filters.showsIgnored)
        filters.search = try SearchQuery.parse("!is:resolved")
        #expect(filters.showsIgnored)
        filters.search = try SearchQuery.parse("is:assigned crash")
        #expect(!filters.showsIgnored)
        let terms: PostgresQuery = "\(groupFilter: filters)"
        #expect(terms.sql.hasSuffix("\n  AND COALESCE(assignee IS NOT NULL, false)\n  AND COALESCE(strpos(lower(title), lower($6)) > 0, false)"))
    }

    @Test func timePlanNamesItsPieces() {
        let window = TimeWindow(from: Self.date("2026-11-20T10:30:00Z"), to: Self.date("2026-11-23T05:15:00Z"))
        let plan = window.plan
        #expect(plan.rawHead == TimeRange(from: Self.date("2026-11-20T10:30:00Z"), to: Self.date("2026-11-20T11:00:00Z")))
        #expect(plan.hoursHead == TimeRange(from: Self.date("2026-11-20T11:00:00Z"), to: Self.date("2026-11-21T00:00:00Z")))
        #expect(plan.days == TimeRange(from: Self.date("2026-11-21T00:00:00Z"), to: Self.date("2026-11-23T00:00:00Z")))
        #expect(plan.hoursTail == TimeRange(from: Self.date("2026-11-23T00:00:00Z"), to: Self.date("2026-11-23T05:00:00Z")))
        #expect(plan.rawTail == TimeRange(from: Self.date("2026-11-23T05:00:00Z"), to: Self.date("2026-11-23T05:15:00Z")))
        // 13 leading hours are read as their whole day minus the 11 hours before the window;
        // the 5 trailing hours are added as they are.
        let subtractive = window.subtractivePlan
        #expect(subtractive.days == TimeRange(from: Self.date("2026-11-20T00:00:00Z"), to: Self.date("2026-11-23T00:00:00Z")))
        #expect(subtractive.head.range == TimeRange(from: Self.date("2026-11-20T00:00:00Z"), to: Self.date("2026-11-20T11:00:00Z")))
        #expect(subtractive.head.sign == -1)
        #expect(subtractive.tail.range == plan.hoursTail)
        #expect(subtractive.tail.sign == 1)
        let query: PostgresQuery = "\("ts", in: plan.rawHead)"
        #expect(query.sql == "ts >= $1 AND ts < $2")
    }

    /// The device sketches of a window: an edge day is its day row only where the rest of the
    /// day adds nothing (after now) or little (at most 1/14 of the window before it, inside
    /// retention); otherwise its hours.
    @Test func sketchPlanReadsAnEdgeDayWholeOnlyWhereItAddsNothingOrLittle() {
        func d(_ text: String) -> Date { Self.date("2026-11-\(text):00Z") }
        func hours(_ from: String, _ to: String) -> TimeRange { TimeRange(from: d(from), to: d(to)) }
        let old = d("01T00:00")
        // The default 7 days at 03:40: 3 hours of the first day before the window (at most 12),
        // today's elapsed hours and the rest of today after now: 8 day rows, no hour.
        let week = TimeWindow.lastSevenDays(now: d("28T03:40"))
        var plan = week.sketchPlan(now: d("28T03:40"), notBefore: old)
        #expect(plan.days == hours("21T00:00", "29T00:00"))
        #expect(plan.hoursHead.from == plan.hoursHead.to && plan.hoursTail.from == plan.hoursTail.to)
        // At 21:40, 21 hours would be added before it: the first day's 3 hours stay hourly.
        plan = TimeWindow.lastSevenDays(now: d("28T21:40")).sketchPlan(now: d("28T21:40"), notBefore: old)
        #expect(plan.hoursHead == hours("21T21:00", "22T00:00"))
        #expect(plan.days == hours("22T00:00", "29T00:00"))
        // The same 03:40 window with the retention's cut-off after the first day's start.
        plan = week.sketchPlan(now: d("28T03:40"), notBefore: d("21T01:15"))
        #expect(plan.hoursHead == hours("21T03:00", "22T00:00"))
        #expect(plan.days == hours("22T00:00", "29T00:00"))
        // A window that ended at noon yesterday: its afternoon holds reports, so hours.
        let past = TimeWindow(from: d("20T00:00"), to: d("27T12:00"))
        plan = past.sketchPlan(now: d("28T21:40"), notBefore: old)
        #expect(plan.days == hours("20T00:00", "27T00:00"))
        #expect(plan.hoursTail == hours("27T00:00", "27T12:00"))
        // Within one day, and a window of a few hours: hours unless the day adds nothing.
        plan = TimeWindow(from: d("28T05:00"), to: d("28T09:30")).sketchPlan(now: d("28T21:40"), notBefore: old)
        #expect(plan.hoursHead == hours("28T05:00", "28T10:00") && plan.days.from == plan.days.to)
        plan = TimeWindow(from: d("28T00:00"), to: d("28T21:40")).sketchPlan(now: d("28T21:40"), notBefore: old)
        #expect(plan.days == hours("28T00:00", "29T00:00"))
        #expect(plan.hoursHead.from == plan.hoursHead.to)
    }

    @Test func anEdgeIsWidenedToItsHourOnlyWhereFewerRawReportsAreRead() {
        func d(_ text: String) -> Date { Self.date("2026-11-\(text)Z") }
        func range(_ from: String, _ to: String) -> TimeRange { TimeRange(from: d(from), to: d(to)) }
        let now = d("28T21:40:00")
        // 20 minutes before the window in its first hour, 25 after it in its last: both hours
        // whole, those parts taken away.
        var (window, outside) = TimeWindow(from: d("20T05:20:00"), to: d("27T09:35:00")).widenedToHours(now: now)
        #expect(window == TimeWindow(from: d("20T05:00:00"), to: d("27T10:00:00")))
        #expect(outside == [range("20T05:00:00", "20T05:20:00"), range("27T09:35:00", "27T10:00:00")])
        // 50 minutes before, 40 after: read as they are.
        (window, outside) = TimeWindow(from: d("20T05:50:00"), to: d("27T09:20:00")).widenedToHours(now: now)
        #expect(window == TimeWindow(from: d("20T05:50:00"), to: d("27T09:20:00")) && outside.isEmpty)
        // Ending a second before now, 40 minutes into the hour: the rest of the hour is in the
        // future but for a second, so the hour is whole; half and half is read as it is.
        (window, outside) = TimeWindow(from: d("20T05:30:00"), to: d("28T21:39:59")).widenedToHours(now: now)
        #expect(window == TimeWindow(from: d("20T05:30:00"), to: d("28T22:00:00")))
        #expect(outside == [range("28T21:39:59", "28T22:00:00")])
        // Whole hours, and a window within one hour: nothing to widen.
        (window, outside) = TimeWindow(from: d("20T05:00:00"), to: d("27T09:00:00")).widenedToHours(now: now)
        #expect(window == TimeWindow(from: d("20T05:00:00"), to: d("27T09:00:00")) && outside.isEmpty)
        (window, outside) = TimeWindow(from: d("27T09:05:00"), to: d("27T09:10:00")).widenedToHours(now: now)
        #expect(window == TimeWindow(from: d("27T09:05:00"), to: d("27T09:10:00")) && outside.isEmpty)
    }

    @Test func topBuildsATypedListRequestAndNamesABadOption() throws {
        let now = Self.date("2026-11-28T12:10:00Z")
        var table = TopCrashesTable()
        (table.version, table.os, table.kind, table.status, table.limit) = ("2.0", "", "kvo", "resolved", 5)
        let request = try table.listRequest(window: .day, now: now)
        #expect(request.filters == GroupFilters(version: "2.0", os: nil, kind: .kvo, status: .resolved))
        #expect(request.limit == 5)
        #expect(request.trend == .hour)
        #expect(request.window == TimeWindow(from: Self.date("2026-11-27T13:00:00Z"), to: Self.date("2026-11-28T13:00:00Z")))
        table.status = "closed"
        #expect { try table.listRequest(window: .day, now: now) } throws: { error in
            (error as? ProjectError)?.description == "--status: not one of open, resolved, ignored, regressed"
        }
        table.status = nil
        table.limit = 0
        #expect(throws: ProjectError.self) { try table.listRequest(window: .day, now: now) }
    }

    /// The dashboard's top-crashes page and `GET .../crashes` with the same filters answer the
    /// same page: both are one typed request to the same service.
    @Test func dashboardPageAndRESTListAreTheSameRequest() async throws {
        let store = InMemoryCrashStore()
        let project = store.addProject(slug: "demo", readToken: "crt_demo")
        let now = Date()
        for i in 0..<3 { store.add(project, signature: "crash \(i)", kind: .kvo, at: now.addingTimeInterval(-Double(i + 1) * 3600)) }
        store.add(project, signature: "other kind", kind: .timer, at: now.addingTimeInterval(-600))
        let service = QueryService(store: store)
        let range = DashboardWindow.week.range(now: now)
        let page = try DashboardQuery(values: ["kind": "kvo", "window": "7d"]).crashList(project: project, limit: 2, now: now)
        let rest = try GroupListRequest(
            QueryParameters([
                "kind": "kvo", "limit": "2", "trend": "hour", "from": RFC3339.format(range.from), "to": RFC3339.format(range.to),
            ]), project: project)
        #expect(page == rest)
        let body = try await service.groups(project, page)
        #expect(body.groups.count == 2)
        #expect(body.groups.allSatisfy { $0.kind == "kvo" && $0.trend?.count == 168 })
        let next = try #require(body.nextCursor)
        let second = try DashboardQuery(values: ["kind": "kvo", "cursor": next]).crashList(project: project, limit: 2, now: now)
        #expect(try await service.groups(project, second).groups.count == 1)
        #expect(throws: APIError.self) { try DashboardQuery(values: ["status": "closed"]).crashList(project: project, limit: 2) }
    }

    /// The crash page's merge choices are the default list's first page, in its order, as the
    /// groups' rows: the ranking alone, with no trends, devices or versions read for rows that
    /// show an id and a title.
    @Test func mergeChoicesRankTheDefaultListWithoutItsRowsReads() async throws {
        let store = InMemoryCrashStore()
        let project = store.addProject(slug: "merge-choices", readToken: "crt_merge_choices")
        let now = Date()
        for i in 0..<4 {
            for n in 0...i { store.add(project, signature: "crash \(i)", at: now.addingTimeInterval(-Double(n + 1) * 600)) }
        }
        store.add(project, signature: "last month", at: now.addingTimeInterval(-20 * 86_400))
        store.add(project, signature: "last month", at: now.addingTimeInterval(-21 * 86_400))
        let service = QueryService(store: store)
        let request = try DashboardQuery(values: [:]).crashList(project: project, limit: 3, now: now)
        let list = try await service.groups(project, request).groups
        #expect(store.takeRowReads().contains("groupTrends"))
        let rows = try await service.rankedRows(project, request)
        #expect(rows.map { String($0.id) } == list.map(\.id))
        #expect(rows.map(\.title) == ["custom: crash 3", "custom: crash 2", "custom: crash 1"])
        #expect(store.takeRowReads() == [])
    }

    /// The dashboard's Releases pages and `GET .../releases` with the same window and filters
    /// are the same typed requests; a bad value is the API's 400 on both.
    @Test func dashboardReleasePagesAndRESTAreTheSameRequests() throws {
        let now = Date()
        let range = DashboardWindow.day.range(now: now)
        let values = ["window": DashboardWindow.day.rawValue, "environment": "staging", "app": "com.acme.shop"]
        let window = ["from": RFC3339.format(range.from), "to": RFC3339.format(range.to)]
        let filters = window.merging(["environment": "staging", "app": "com.acme.shop"]) { a, _ in a }
        let cursor = ReleaseCursor(
            sessions: 7, version: "2.4.0", from: ListCursor.micros(range.from), to: ListCursor.micros(range.to)
        ).encode()

        let list = try DashboardQuery(values: values.merging(["cursor": cursor]) { a, _ in a }).releaseList(limit: 25, now: now)
        let restList = try ReleasesController.listRequest(
            QueryParameters(filters.merging(["limit": "25", "cursor": cursor]) { a, _ in a }))
        #expect(list == restList)
        #expect(list.filters == SessionFilters(environment: "staging", app: "com.acme.shop"))
        #expect(list.cursor?.version == "2.4.0")

        let detail = try DashboardQuery(values: values).release("2.4.0", now: now)
        let restDetail = try ReleasesController.detailRequest(version: "2.4.0", QueryParameters(filters.merging(["interval": "hour"]) { a, _ in a }))
        #expect(detail == restDetail)

        #expect(throws: APIError.self) { try DashboardQuery(values: ["cursor": "forged"]).releaseList(limit: 25) }
        #expect(throws: APIError.self) { try ReleasesController.detailRequest(version: "2.4.0", QueryParameters(["interval": "week"])) }
    }
}
