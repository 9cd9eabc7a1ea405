import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The web dashboard at `/`: sign-in, project overview, top crashes, crash detail and
/// triage, rendered on the server from the templates in `Resources/` (see docs/dashboard.md).
struct DashboardController<Store: DashboardStore>: Sendable {
    let store: Store
    let sessions: DashboardSessions
    let pages: DashboardPages
    let logger: Logger
    /// Users, their sessions and roles (DashboardAccounts.swift).
    let people: DashboardAccounts

    /// Rows per page of the top-crashes list.
    static var pageSize: Int { 25 }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let group = router.group().add(middleware: DashboardMiddleware(pages: pages, logger: logger))
            .add(middleware: DashboardAccountMiddleware(accounts: people.accounts, audit: people.audit))
        addAccountRoutes(to: group)
        addTriageRoutes(to: group)
        addAlertRoutes(to: group)
        group.get("/", use: home)
        group.post("/signin", use: signIn)
        group.post("/signout", use: signOut)
        group.get("/dashboard.css", use: stylesheet)
        group.get("/projects/:project", use: overview)
        group.get("/projects/:project/crashes", use: crashes)
        group.get("/projects/:project/crashes/:id", use: crash)
        group.post("/projects/:project/crashes/:id", use: triage)
        group.get("/projects/:project/releases", use: releases)
        group.get("/projects/:project/releases/:version", use: release)
    }

    // MARK: - Sign-in and sign-out

    /// Signed in: to the project's overview. Otherwise the sign-in form, with a fresh
    /// pre-session nonce for its CSRF token.
    @Sendable func home(request: Request, context: CrashRequestContext) async throws -> Response {
        if let user = context.user { return try await projectsPage(user, request) }
        if let (_, project) = try await session(request) {
            return DashboardResponse.redirect("/projects/\(project.slug)")
        }
        return signInPage(error: nil, status: .ok)
    }

    @Sendable func signIn(request: Request, context: CrashRequestContext) async throws -> Response {
        let form = try await Self.form(request, as: SignInForm.self)
        guard let nonce = request.cookies[sessions.signInCookieName]?.value,
            DashboardSessions.equal(sessions.signInToken(nonce: nonce), form.csrf ?? "")
        else {
            return signInPage(error: "The form expired or cookies are blocked: please try again.", status: .forbidden)
        }
        if let email = form.email, !email.isEmpty {
            return try await passwordSignIn(email: email, password: form.password ?? "", context: context)
        }
        let token = (form.token ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let session = sessions.issue()
        guard !token.isEmpty, token.utf8.count <= 256,
            let project = try await store.startSession(
                session, expires: Date().addingTimeInterval(DashboardSessions.lifetime), readToken: token)
        else {
            return signInPage(error: "That read token does not belong to any project.", status: .unauthorized)
        }
        var response = DashboardResponse.redirect("/projects/\(project.slug)")
        response.setCookie(sessions.sessionCookie(session))
        response.setCookie(sessions.expired(sessions.signInCookieName))
        logger.info("dashboard sign-in", metadata: ["project.slug": "\(project.slug)"])
        return response
    }

    /// Ends the session on the server (its row is deleted, so a copy of the cookie opens
    /// nothing afterwards) and clears the cookie. A signed-in sign-out needs the CSRF token.
    @Sendable func signOut(request: Request, context: CrashRequestContext) async throws -> Response {
        let form = try await Self.form(request, as: SignOutForm.self)
        if let user = context.user, let session = request.cookies[sessions.cookieName].flatMap({ DashboardSessions.session(cookie: $0.value) }) {
            guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else { throw DashboardError.forbidden }
            try await userSignOut(user, request, context)
        } else if let (session, project) = try await session(request) {
            guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else {
                throw DashboardError.forbidden
            }
            try await store.endSession(session)
            logger.info("dashboard sign-out", metadata: ["project.slug": "\(project.slug)"])
        }
        var response = DashboardResponse.redirect("/")
        response.setCookie(sessions.expired(sessions.cookieName))
        return response
    }

    @Sendable func stylesheet(request: Request, context: CrashRequestContext) async throws -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "text/css; charset=utf-8", .cacheControl: "public, max-age=3600"],
            body: .init(byteBuffer: pages.stylesheet))
    }

    // MARK: - Pages

    @Sendable func overview(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let q = DashboardQuery(request)
        let window = q.window
        let range = window.range()
        let stats = try await store.queries.stats(project, StatsRequest(window: range.window, interval: window.interval, groupBy: .fatal))
        let fatal = stats.series.first { $0.key == "fatal" }?.points ?? []
        let nonFatal = stats.series.first { $0.key == "nonFatal" }?.points ?? []
        let points = zip(fatal, nonFatal).map { (t: $0.t, total: $0.count + $1.count, fatal: $0.count) }
        let newest = try await store.queries.groups(project, GroupListRequest(window: range.window, sort: .firstSeen, limit: 10))
        let regressed = try await store.queries.groups(
            project, GroupListRequest(window: range.window, filters: GroupFilters(status: .regressed), sort: .lastSeen, limit: 10))
        let now = Date()
        let newGroups = newest.groups.filter { $0.firstSeen >= range.from }
        let view = OverviewView(
            pageTitle: project.slug, nav: nav(project, session, overview: true), project: project.slug,
            windowLabel: window.label, windows: windowTabs(q, base: "/projects/\(project.slug)"),
            total: DashboardFormat.number(points.reduce(0) { $0 + $1.total }),
            fatalTotal: DashboardFormat.number(points.reduce(0) { $0 + $1.fatal }),
            nonFatalTotal: DashboardFormat.number(points.reduce(0) { $0 + $1.total - $1.fatal }),
            newCount: newGroups.count == 10 && newest.nextCursor != nil ? "10+" : "\(newGroups.count)",
            regressedCount: regressed.nextCursor != nil ? "10+" : "\(regressed.groups.count)",
            chart: ChartView(points: points, hourly: window.hourly),
            hasNew: !newGroups.isEmpty, newGroups: newGroups.map { GroupView($0, project: project, now: now) },
            hasRegressed: !regressed.groups.isEmpty,
            regressedGroups: regressed.groups.map { GroupView($0, project: project, now: now) },
            renderedAt: DashboardFormat.exact(now))
        return try html(view, "overview")
    }

    @Sendable func crashes(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let q = DashboardQuery(request)
        let window = q.window
        let list = try await store.queries.groups(project, try q.crashList(project: project, limit: Self.pageSize))
        let now = Date()
        let base = "/projects/\(project.slug)/crashes"
        let kept = q.values.filter { ["window", "version", "os", "kind", "status", "environment", "q"].contains($0.key) }
        let filters = ["version", "os", "kind", "environment", "q"].compactMap { name in q.values[name].map { "\(name) \($0)" } }
        let statuses: [(String?, String)] = [
            (nil, "Active"), ("open", "Open"), ("regressed", "Regressed"), ("resolved", "Resolved"), ("ignored", "Ignored"),
        ]
        var view = CrashesView(
            pageTitle: "Crashes · \(project.slug)", nav: nav(project, session, crashes: true), project: project.slug,
            window: window.rawValue, windowLabel: window.label, windows: windowTabs(q, base: base),
            statuses: statuses.map { value, label in
                var values = kept
                values["status"] = value
                return TabView(label: label, href: base + DashboardQuery.string(values), current: q.values["status"] == value)
            },
            statusValue: q.values["status"], version: q.values["version"] ?? "", os: q.values["os"] ?? "",
            kinds: ReportKind.allCases.map { KindOption(value: $0.rawValue, selected: q.values["kind"] == $0.rawValue) },
            filtered: !filters.isEmpty,
            clearHref: base + DashboardQuery.string(kept.filter { $0.key == "window" || $0.key == "status" }),
            filterSummary: filters.isEmpty ? nil : filters.joined(separator: ", "),
            hasRows: !list.groups.isEmpty,
            rows: list.groups.map { GroupView($0, project: project, now: now) },
            pager: PagerView(
                shown: "\(list.groups.count) crash group\(list.groups.count == 1 ? "" : "s") on this page", base: base, kept: kept,
                followedCursor: q.values["cursor"] != nil, nextCursor: list.nextCursor),
            renderedAt: DashboardFormat.exact(now))
        view.bulk = bulkView(csrf: sessions.csrfToken(for: session), query: q, count: list.groups.count)
        (view.search, view.environments) = try await searchBox(project, query: q)
        return try html(view, "crashes")
    }

    @Sendable func crash(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let id = try Self.groupID(context)
        let q = DashboardQuery(request)
        let window = q.window
        let detail = try await store.queries.group(project, GroupDetailRequest(group: id, window: window.range().window))
        let reports = try await store.queries.reports(project, ReportListRequest(group: id, limit: 5)).reports
        let now = Date()
        let group = detail.group
        // The hourly histogram, summed per day for the 30-day window.
        var points = detail.histogram.map { (t: $0.t, total: $0.count, fatal: Int64(0)) }
        if !window.hourly {
            var days: [(t: Date, total: Int64, fatal: Int64)] = []
            for p in points {
                let day = TimeWindow.floor(p.t, TimeWindow.day)
                if days.last?.t == day { days[days.count - 1].total += p.total } else { days.append((day, p.total, 0)) }
            }
            points = days
        }
        let notice: String? =
            switch q.values["triaged"] {
            case "resolved": "Marked as resolved" + (group.resolvedIn.map { " in \($0)" } ?? "") + "."
            case "ignored": "Ignored: this group is hidden from the default list and its reports are still counted."
            case "open": "Reopened."
            default: nil
            }
        var view = CrashView(
            pageTitle: group.title, nav: nav(project, session, crashes: true), csrf: sessions.csrfToken(for: session),
            project: project.slug, group: GroupView(group, project: project, now: now), signature: group.signature,
            windowLabel: window.label, windows: windowTabs(q, base: "/projects/\(project.slug)/crashes/\(group.id)"),
            notice: notice, isOpen: group.status == .open, isIgnored: group.status == .ignored,
            chart: ChartView(points: points, hourly: window.hourly),
            breakdowns: [
                BreakdownView("Versions", detail.breakdown.versions), BreakdownView("OS", detail.breakdown.os),
                BreakdownView("Models", detail.breakdown.models),
            ],
            reports: reports.map { ReportView($0, now: now) }, renderedAt: DashboardFormat.exact(now))
        view.triage = try await triagePanel(project, group: group, csrf: view.csrf, now: now)
        return try html(view, "crash")
    }

    /// The triage forms: `action` = resolve (with an optional `resolvedIn`), ignore or reopen.
    @Sendable func triage(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let id = try Self.groupID(context)
        let form = try await Self.form(request, as: TriageForm.self)
        guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else { throw DashboardError.forbidden }
        let status: GroupStatus
        var resolvedIn: String?
        switch form.action {
        case "resolve":
            status = .resolved
            let version = (form.resolvedIn ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard version.utf8.count <= 128 else { throw APIError.badRequest("resolvedIn: at most 128 bytes") }
            resolvedIn = version.isEmpty ? nil : version
        case "ignore": status = .ignored
        case "reopen": status = .open
        default: throw APIError.badRequest("action: must be resolve, ignore or reopen")
        }
        let change = GroupChange(status: status, resolvedIn: resolvedIn)
        guard try await store.triage.store.apply(change, to: [id], project: project.id, actor: context.principal).contains(id) else {
            throw APIError.notFound("no crash group \(id) in this project")
        }
        logger.info("dashboard triage", metadata: ["project.slug": "\(project.slug)", "group.id": "\(id)", "group.status": "\(status.rawValue)"])
        return DashboardResponse.redirect("/projects/\(project.slug)/crashes/\(id)?triaged=\(status.rawValue)")
    }

    // MARK: - Helpers

    /// The request's stored, unexpired session and its project, or nil.
    func session(_ request: Request) async throws -> (DashboardSessions.Session, ProjectRef)? {
        guard let cookie = request.cookies[sessions.cookieName]?.value, let session = DashboardSessions.session(cookie: cookie) else {
            return nil
        }
        guard let project = try await store.project(session: session) else { return nil }
        return (session, project)
    }

    /// The session of a project page: no session redirects to sign-in, another project's
    /// path is a 404 (as the API: a session cannot probe which projects exist).
    func signedIn(_ request: Request, _ context: CrashRequestContext) async throws -> (DashboardSessions.Session, ProjectRef) {
        if let user = context.user, let session = request.cookies[sessions.cookieName].flatMap({ DashboardSessions.session(cookie: $0.value) }) {
            return (session, try await userProject(user, request, context).0)
        }
        guard let (session, project) = try await session(request) else { throw DashboardError.signInRequired }
        guard context.parameters.get("project") == project.slug else {
            throw APIError.notFound("no project '\(context.parameters.get("project") ?? "")'")
        }
        return (session, project)
    }

    func signInPage(error: String?, status: HTTPResponse.Status) -> Response {
        let nonce = DashboardSessions.nonce()
        let view = SignInView(
            pageTitle: "Sign in", csrf: sessions.signInToken(nonce: nonce), error: error, singleSignOn: people.singleSignOn)
        var response = (try? html(view, "signin", status: status)) ?? Response(status: .internalServerError)
        response.setCookie(sessions.signInCookie(nonce))
        return response
    }

    func nav(
        _ project: ProjectRef, _ session: DashboardSessions.Session, overview: Bool = false, crashes: Bool = false,
        releases: Bool = false
    )
        -> NavView
    {
        NavView(
            project: project.slug, csrf: sessions.csrfToken(for: session), overview: overview, crashes: crashes,
            releases: releases)
    }

    func windowTabs(_ q: DashboardQuery, base: String) -> [TabView] {
        DashboardWindow.allCases.map { w in
            var values = q.values.filter { $0.key != "cursor" && $0.key != "triaged" }
            values["window"] = w == .week ? nil : w.rawValue
            return TabView(label: w.tab, href: base + DashboardQuery.string(values), current: w == q.window)
        }
    }

    func html(_ view: Any, _ template: String, status: HTTPResponse.Status = .ok) throws -> Response {
        DashboardResponse.html(try pages.render(view, template), status: status)
    }

    static func groupID(_ context: CrashRequestContext) throws -> Int64 {
        let text = context.parameters.get("id") ?? ""
        guard let id = Int64(text), id > 0 else { throw APIError.notFound("no crash group '\(text)'") }
        return id
    }

    /// An `application/x-www-form-urlencoded` body of at most 16 KiB, decoded with
    /// Hummingbird's form decoder; a malformed one is a 400.
    static func form<Form: Decodable>(_ request: Request, as _: Form.Type) async throws -> Form {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: 16 * 1024)
        } catch {
            throw APIError.payloadTooLarge("form: larger than 16 KiB")
        }
        do {
            return try URLEncodedFormDecoder().decode(Form.self, from: String(buffer: buffer))
        } catch {
            throw APIError.badRequest("form: not a form this page sent")
        }
    }
}

/// The sign-in form.
struct SignInForm: Decodable {
    var token: String?
    var email: String?
    var password: String?
    var csrf: String?
}

/// The sign-out form.
struct SignOutForm: Decodable {
    var csrf: String?
}

/// The triage forms of the crash page.
struct TriageForm: Decodable {
    var action: String?
    var resolvedIn: String?
    var csrf: String?
}

/// Why a dashboard request was refused, rendered by ``DashboardMiddleware``.
struct DashboardError: Error, Sendable {
    private enum Code: Sendable { case signInRequired, forbidden }
    private let code: Code

    /// No valid session: to the sign-in page.
    static let signInRequired = DashboardError(code: .signInRequired)
    /// A state-changing form without a valid CSRF token: 403.
    static let forbidden = DashboardError(code: .forbidden)

    var isSignInRequired: Bool { code == .signInRequired }
}

/// The window tabs: 24 hours, 7 days (the default), 30 days.
enum DashboardWindow: String, CaseIterable, Sendable {
    case day = "24h", week = "7d", month = "30d"

    var label: String {
        switch self {
        case .day: "24 hours"
        case .week: "7 days"
        case .month: "30 days"
        }
    }

    var tab: String {
        switch self {
        case .day: "24 h"
        case .week: "7 d"
        case .month: "30 d"
        }
    }

    /// Hourly buckets for 24 h and 7 d, daily for 30 d.
    var hourly: Bool { self != .month }

    /// The charts' and sparklines' bucket.
    var interval: StatsInterval { hourly ? .hour : .day }

    /// The window ending at the end of the current hour (whole hours read only rollups).
    func range(now: Date = Date()) -> DashboardRange {
        let to = TimeWindow.floor(now, TimeWindow.hour).addingTimeInterval(TimeWindow.hour)
        let length: Double =
            switch self {
            case .day: TimeWindow.day
            case .week: 7 * TimeWindow.day
            case .month: 30 * TimeWindow.day
            }
        return DashboardRange(from: to.addingTimeInterval(-length), to: to)
    }
}

struct DashboardRange: Sendable {
    var from: Date
    var to: Date
    var window: TimeWindow { TimeWindow(from: from, to: to) }

    /// Query-API parameters for this range plus `extra`.
    func parameters(_ extra: [String: String]) -> [String: String] {
        var out = extra
        out["from"] = RFC3339.format(from)
        out["to"] = RFC3339.format(to)
        return out
    }
}

/// A page's query string: non-empty values only (an empty filter box means no filter).
struct DashboardQuery: Sendable {
    var values: [String: String] = [:]

    init(values: [String: String]) { self.values = values }

    init(_ request: Request) {
        for (key, value) in Self.formFields(request.uri.query ?? "") where !value.isEmpty {
            let name = key
            guard ["window", "version", "os", "kind", "status", "cursor", "triaged", "environment", "app", "q"].contains(name) else {
                continue
            }
            values[name] = String(value)
        }
    }

    var window: DashboardWindow { values["window"].flatMap(DashboardWindow.init(rawValue:)) ?? .week }

    /// A query string as an HTML form writes it (`application/x-www-form-urlencoded`): `+` is
    /// a space and `%2B` a plus, so a search typed with spaces (`is:open screen:checkout`) and
    /// one with a plus (`firstSeen:+24h`) both arrive as typed. Undecodable pairs are skipped.
    static func formFields(_ query: String) -> [(String, String)] {
        query.split(separator: "&").compactMap { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ text: Substring) -> String? { text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let key = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : "") else { return nil }
            return (key, value)
        }
    }

    /// The top-crashes page as a list request: the window's range with trends in its
    /// interval, the filters as the API reads them (version, OS, kind, status, environment and
    /// the search `q`) and the cursor; a bad value is a 400 naming it, as in the API.
    func crashList(project: ProjectRef, limit: Int, now: Date = Date()) throws -> GroupListRequest {
        let q = QueryParameters(values)
        let filters = try q.filters()
        let cursor = try q.string("cursor").map { try ListCursor.decode($0, order: .count, project: project.id) }
        return GroupListRequest(
            window: window.range(now: now).window, filters: filters, limit: limit, cursor: cursor, trend: window.interval)
    }

    /// `?a=1&b=2` in a stable order, or "" when empty.
    static func string(_ values: [String: String?]) -> String {
        let pairs = values.compactMap { key, value in value.map { (key, $0) } }.sorted { $0.0 < $1.0 }
        guard !pairs.isEmpty else { return "" }
        return "?" + pairs.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }

    static func string(_ values: [String: String]) -> String {
        string(values.mapValues { Optional($0) })
    }

    private static let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
    static func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? "" }
}

/// The dashboard's two kinds of answer.
enum DashboardResponse {
    /// An HTML page.
    static func html(_ text: String, status: HTTPResponse.Status) -> Response {
        Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// 303 See Other: after a POST, the browser GETs the next page.
    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }
}
