import Foundation
import Hummingbird
import Mustache

/// The Releases pages (release-health.md, "Dashboard"): the releases list with window,
/// environment and app filters, and a release's page with its series, top crash groups and
/// the groups it introduced. Read from the same functions as `GET /v1/projects/{p}/releases`.
extension DashboardController {
    @Sendable func releases(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let q = DashboardQuery(request)
        let window = q.window
        let list = try await store.releases(project, q.releaseList(limit: Self.pageSize))
        let now = Date()
        let base = "/projects/\(project.slug)/releases"
        let kept = q.values.filter { ["window", "environment", "app"].contains($0.key) }
        let detailQuery = DashboardQuery.string(kept)
        let view = ReleasesView(
            pageTitle: "Releases · \(project.slug)", nav: nav(project, session, releases: true), project: project.slug,
            window: window.rawValue, windowLabel: window.label, windows: windowTabs(q, base: base),
            environment: q.values["environment"] ?? "", environmentValue: q.values["environment"], app: q.values["app"] ?? "",
            hasRows: !list.releases.isEmpty,
            rows: list.releases.map { ReleaseRowView($0, href: base + "/" + DashboardQuery.encode($0.version) + detailQuery, now: now) },
            pager: PagerView(
                shown: "\(list.releases.count) release\(list.releases.count == 1 ? "" : "s") on this page", base: base, kept: kept,
                followedCursor: q.values["cursor"] != nil, nextCursor: list.nextCursor),
            renderedAt: DashboardFormat.exact(now))
        return try html(view, "releases")
    }

    @Sendable func release(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let raw = context.parameters.get("version") ?? ""
        let version = raw.removingPercentEncoding ?? raw
        let q = DashboardQuery(request)
        let window = q.window
        let detail = try await store.release(project, q.release(version))
        let now = Date()
        let kept = q.values.filter { ["window", "environment", "app"].contains($0.key) }
        let view = ReleaseView(
            pageTitle: "\(version) · \(project.slug)", nav: nav(project, session, releases: true), project: project.slug,
            version: version, listHref: "/projects/\(project.slug)/releases" + DashboardQuery.string(kept),
            windowLabel: window.label,
            windows: windowTabs(q, base: "/projects/\(project.slug)/releases/" + DashboardQuery.encode(version)),
            environmentValue: q.values["environment"],
            sessions: DashboardFormat.number(detail.sessions), crashFreeSessions: ReleaseRowView.percent(detail.crashFreeSessions),
            crashFreeUsers: ReleaseRowView.percent(detail.crashFreeUsers), crashed: DashboardFormat.number(detail.crashedSessions),
            errored: DashboardFormat.number(detail.erroredSessions), abnormal: DashboardFormat.number(detail.abnormalSessions),
            adoption: ReleaseRowView.percent(detail.adoption),
            chart: ChartView(points: detail.series.map { (t: $0.t, total: $0.sessions, fatal: $0.crashed) }, hourly: window.hourly),
            hasSeries: detail.series.contains { $0.sessions > 0 },
            series: detail.series.filter { $0.sessions > 0 }.map {
                SeriesRowView(
                    label: DashboardFormat.bucket($0.t, hourly: window.hourly), sessions: DashboardFormat.number($0.sessions),
                    crashed: DashboardFormat.number($0.crashed), errored: DashboardFormat.number($0.errored),
                    abnormal: DashboardFormat.number($0.abnormal))
            },
            hasTop: !detail.topGroups.isEmpty, topGroups: detail.topGroups.map { GroupView($0, project: project, now: now) },
            hasIntroduced: !detail.newGroups.isEmpty,
            introducedGroups: detail.newGroups.map { GroupView($0, project: project, now: now) },
            renderedAt: DashboardFormat.exact(now))
        return try html(view, "release")
    }
}

extension DashboardQuery {
    /// The Releases page as a list request: the window's range, the environment and app
    /// filters and the cursor; a bad value is a 400 naming it, as in the API.
    func releaseList(limit: Int, now: Date = Date()) throws -> ReleaseListRequest {
        let q = QueryParameters(values)
        let filters = try ReleasesController.filters(q)
        let cursor = try values["cursor"].map(ReleaseCursor.decode)
        return ReleaseListRequest(window: window.range(now: now).window, filters: filters, limit: limit, cursor: cursor)
    }

    /// A release's page as a detail request: the window's range with the series in its
    /// interval, and the environment and app filters.
    func release(_ version: String, now: Date = Date()) throws -> ReleaseDetailRequest {
        ReleaseDetailRequest(
            version: version, window: window.range(now: now).window, filters: try ReleasesController.filters(QueryParameters(values)),
            interval: window.interval)
    }
}

extension PostgresDashboardStore {
    func releases(_ project: ProjectRef, _ request: ReleaseListRequest) async throws -> ReleaseListBody {
        try await releases.listBody(project: project, request)
    }

    func release(_ project: ProjectRef, _ request: ReleaseDetailRequest) async throws -> ReleaseDetailBody {
        try await releases.detailBody(project: project, request)
    }
}

struct ReleasesView: Sendable {
    var pageTitle: String
    var nav: NavView
    var project: String
    var window: String
    var windowLabel: String
    var windows: [TabView]
    var environment: String
    var environmentValue: String?
    var app: String
    var hasRows: Bool
    var rows: [ReleaseRowView]
    var pager: PagerView
    var renderedAt: String
}

struct ReleaseRowView: Sendable {
    var version: String
    var href: String
    var sessions: String
    var crashFreeSessions: String
    var crashFreeUsers: String
    var users: String
    var adoption: String
    var firstSeen: String
    var firstSeenExact: String

    init(_ release: ReleaseFigures, href: String, now: Date) {
        version = release.version
        self.href = href
        sessions = DashboardFormat.number(release.sessions)
        crashFreeSessions = Self.percent(release.crashFreeSessions)
        crashFreeUsers = Self.percent(release.crashFreeUsers)
        users = DashboardFormat.number(release.users)
        adoption = Self.percent(release.adoption)
        firstSeen = release.firstSeen.map { DashboardFormat.relative($0, now: now) } ?? "—"
        firstSeenExact = release.firstSeen.map(DashboardFormat.exact) ?? ""
    }

    /// A rate as a percentage with two decimals, never rounded up to 100 % ("—" for none).
    static func percent(_ rate: Double?) -> String {
        guard let rate else { return "—" }
        let hundredths = (rate * 10_000).rounded(.down) / 100
        return String(format: "%.2f %%", hundredths)
    }
}

/// A release row answers Mustache from a switch, not a `Mirror` (see `GroupView: MustacheParent`).
extension ReleaseRowView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "version": version
        case "href": href
        case "sessions": sessions
        case "crashFreeSessions": crashFreeSessions
        case "crashFreeUsers": crashFreeUsers
        case "users": users
        case "adoption": adoption
        case "firstSeen": firstSeen
        case "firstSeenExact": firstSeenExact
        default: nil
        }
    }
}

struct SeriesRowView: Sendable {
    var label: String
    var sessions: String
    var crashed: String
    var errored: String
    var abnormal: String
}

/// A series row answers Mustache from a switch, not a `Mirror` (see `GroupView:
/// MustacheParent`): a 7-day release page lists up to 168 of them.
extension SeriesRowView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "label": label
        case "sessions": sessions
        case "crashed": crashed
        case "errored": errored
        case "abnormal": abnormal
        default: nil
        }
    }
}

struct ReleaseView: Sendable {
    var pageTitle: String
    var nav: NavView
    var project: String
    var version: String
    var listHref: String
    var windowLabel: String
    var windows: [TabView]
    var environmentValue: String?
    var sessions: String
    var crashFreeSessions: String
    var crashFreeUsers: String
    var crashed: String
    var errored: String
    var abnormal: String
    var adoption: String
    var chart: ChartView
    var hasSeries: Bool
    var series: [SeriesRowView]
    var hasTop: Bool
    var topGroups: [GroupView]
    var hasIntroduced: Bool
    var introducedGroups: [GroupView]
    var renderedAt: String
}
