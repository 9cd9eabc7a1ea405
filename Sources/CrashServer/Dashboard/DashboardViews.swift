import CrashWire
import Foundation
import Mustache

// The values each template renders. Only stored properties (the templates read them by
// reflection); optional ones have names no enclosing view uses, since a nil value makes
// mustache look the name up in the enclosing views.

struct NavView: Sendable {
    var project: String
    var csrf: String
    var overview: Bool
    var crashes: Bool
    var releases: Bool = false
    var members: Bool = false
    var alerts: Bool = false
    /// A user (not a read token) is signed in: the members page and the project switcher.
    var signedInUser: Bool = DashboardAccounts.current != nil
}

struct TabView: Sendable {
    var label: String
    var href: String
    var current: Bool
}

struct SignInView: Sendable {
    var pageTitle: String
    var csrf: String
    var error: String?
    /// Offer "Sign in with SSO" (OpenID Connect is configured).
    var singleSignOn: Bool = false
}

struct ErrorView: Sendable {
    var pageTitle: String
    var heading: String
    var message: String
}

struct OverviewView: Sendable {
    var pageTitle: String
    var nav: NavView
    var project: String
    var windowLabel: String
    var windows: [TabView]
    var total: String
    var fatalTotal: String
    var nonFatalTotal: String
    var newCount: String
    var regressedCount: String
    var chart: ChartView
    var hasNew: Bool
    var newGroups: [GroupView]
    var hasRegressed: Bool
    var regressedGroups: [GroupView]
    var renderedAt: String
}

struct KindOption: Sendable {
    var value: String
    var selected: Bool
}

struct PagerView: Sendable {
    var shown: String
    var firstHref: String?
    var nextHref: String?

    /// The pager of a list page at `base` whose query keeps `kept`: a link back to the first
    /// page once a cursor was followed, and one to the next page when there is one.
    init(shown: String, base: String, kept: [String: String], followedCursor: Bool, nextCursor: String?) {
        self.shown = shown
        firstHref = followedCursor ? base + DashboardQuery.string(kept) : nil
        nextHref = nextCursor.map { cursor in
            var values = kept
            values["cursor"] = cursor
            return base + DashboardQuery.string(values)
        }
    }
}

struct CrashesView: Sendable {
    var pageTitle: String
    var nav: NavView
    var project: String
    var window: String
    var windowLabel: String
    var windows: [TabView]
    var statuses: [TabView]
    var statusValue: String?
    var version: String
    var os: String
    var kinds: [KindOption]
    /// The search box's `q` and the environment selector's choices (DashboardController+search.swift).
    var search = ""
    var environments: [KindOption] = []
    var filtered: Bool
    var clearHref: String
    var filterSummary: String?
    var hasRows: Bool
    var rows: [GroupView]
    var pager: PagerView
    var renderedAt: String
    /// The bulk triage form (DashboardController+triage.swift).
    var bulk: BulkView? = nil
}

/// A crash group as the dashboard shows it: a row of the top-crashes table or of the
/// overview's short tables, and the head of its crash page (`group.` in crash.mustache).
struct GroupView: Sendable {
    var id: String
    var href: String
    var title: String
    var kind: String
    var fatal: Bool
    var count: String
    var devices: String
    var firstSeen: String
    var firstSeenExact: String
    var isNew: Bool
    var lastSeen: String
    var lastSeenExact: String
    var versionsShort: String
    var versionsAll: String
    var status: String
    var statusLabel: String
    var resolvedIn: String?
    var sparkLine: String
    var sparkArea: String
    var sparkLabel: String

    init(_ group: GroupBody, project: ProjectRef, now: Date) {
        id = group.id
        href = "/projects/\(project.slug)/crashes/\(group.id)"
        title = group.title
        kind = group.kind
        fatal = group.fatal
        count = DashboardFormat.number(group.count)
        devices = DashboardFormat.number(group.devices)
        firstSeen = DashboardFormat.relative(group.firstSeen, now: now)
        firstSeenExact = DashboardFormat.exact(group.firstSeen)
        isNew = now.timeIntervalSince(group.firstSeen) < TimeWindow.day
        lastSeen = DashboardFormat.relative(group.lastSeen, now: now)
        lastSeenExact = DashboardFormat.exact(group.lastSeen)
        versionsShort = DashboardFormat.versions(group.versions)
        versionsAll = group.versions.joined(separator: ", ")
        status = group.status.rawValue
        statusLabel = DashboardFormat.statusLabel(group.status)
        resolvedIn = group.resolvedIn
        // One point per bucket of the API's trend: hourly for 24 h and 7 d, daily for 30 d (the contract).
        let trend = (group.trend ?? []).map(\.count)
        (sparkLine, sparkArea) = DashboardFormat.sparkline(trend)
        sparkLabel = "Trend over the window, peak \(trend.max() ?? 0)"
    }
}

struct BreakdownView: Sendable {
    struct Entry: Sendable {
        var value: String
        var count: String
        var percent: String
        var bar: String
    }
    var name: String
    var hasEntries: Bool
    var entries: [Entry]

    init(_ name: String, _ values: [ValueCount]) {
        self.name = name
        let total = max(values.reduce(0) { $0 + $1.count }, 1)
        let top = max(values.first?.count ?? 1, 1)
        hasEntries = !values.isEmpty
        entries = values.map {
            Entry(
                value: $0.value, count: DashboardFormat.number($0.count),
                percent: String(format: "%.0f", 100 * Double($0.count) / Double(total)),
                bar: DashboardFormat.fmt(100 * Double($0.count) / Double(top)))
        }
    }
}

struct ReportView: Sendable {
    struct Frame: Sendable {
        var index: String
        var text: String
    }
    struct ContextEntry: Sendable {
        var key: String
        var value: String
    }
    var reportID: String
    var time: String
    var timeExact: String
    var app: String
    var device: String?
    var reason: String
    var hasStack: Bool
    var frames: [Frame]
    var hasContext: Bool
    var context: [ContextEntry]

    init(_ report: StoredReport, now: Date) {
        reportID = report.id
        time = DashboardFormat.relative(report.timestamp, now: now)
        timeExact = DashboardFormat.exact(report.timestamp)
        app = "\(report.app.id) \(report.app.version)" + (report.app.build.map { " (\($0))" } ?? "")
        let parts = [
            report.device?.os.map { os in [os, report.device?.osVersion].compactMap { $0 }.joined(separator: " ") },
            report.device?.model,
        ].compactMap { $0 }
        device = parts.isEmpty ? nil : parts.joined(separator: " · ")
        reason = report.reason
        frames = (report.stack ?? []).enumerated().map { Frame(index: "\($0.offset)", text: $0.element) }
        hasStack = !frames.isEmpty
        context = (report.context ?? [:]).sorted { $0.key < $1.key }.map { ContextEntry(key: $0.key, value: $0.value) }
        hasContext = !context.isEmpty
    }
}

struct CrashView: Sendable {
    var pageTitle: String
    var nav: NavView
    var csrf: String
    var project: String
    var group: GroupView
    var signature: String
    var windowLabel: String
    var windows: [TabView]
    var notice: String?
    var isOpen: Bool
    var isIgnored: Bool
    var chart: ChartView
    var breakdowns: [BreakdownView]
    var reports: [ReportView]
    var renderedAt: String
    /// Assignee, snooze, activity and comments (DashboardController+triage.swift).
    var triage: TriagePanelView? = nil
}

/// swift-mustache finds a name in a value by building a `Mirror` of it and scanning its
/// children, at every lookup: in the release benchmark at 10 M reports that was 14 % of the
/// server's CPU, most of the top-crashes page (25 to 50 rows of 20 names). A row answers
/// from a switch instead. `DashboardTests.groupViewAnswersEveryPropertyLikeItsMirror` checks
/// that every stored property is answered, with the same value a `Mirror` gives.
extension GroupView: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "href": href
        case "title": title
        case "kind": kind
        case "fatal": fatal
        case "count": count
        case "devices": devices
        case "firstSeen": firstSeen
        case "firstSeenExact": firstSeenExact
        case "isNew": isNew
        case "lastSeen": lastSeen
        case "lastSeenExact": lastSeenExact
        case "versionsShort": versionsShort
        case "versionsAll": versionsAll
        case "status": status
        case "statusLabel": statusLabel
        // Absent: `false`, a present name, so the lookup ends here instead of climbing to the
        // enclosing view, and a false section (`{{#resolvedIn}}`) renders nothing. (A nil
        // wrapped in `Any` would be a present value, and the section would print "fixed in nil".)
        case "resolvedIn": resolvedIn ?? false
        case "sparkLine": sparkLine
        case "sparkArea": sparkArea
        case "sparkLabel": sparkLabel
        default: nil
        }
    }
}
