import Foundation
import Mustache
import Testing

@testable import CrashServer

/// The Releases pages' rows answer Mustache from a switch (`MustacheParent`), not a `Mirror`:
/// every stored property must be answered, with the value a `Mirror` gives (so a property
/// added later without a case fails here), and the release template shows every bar and
/// series row with its values.
@Suite struct ReleasePageViewTests {
    static let hour = Date(timeIntervalSince1970: 1_763_935_200)  // 2025-11-23 22:00 UTC

    static func expectAnswersLikeMirror(_ view: some MustacheParent, fields: Int) {
        let mirror = Mirror(reflecting: view)
        #expect(mirror.children.count == fields, "\(type(of: view))")
        for case let (label?, value) in mirror.children {
            let answer = view.child(named: label)
            #expect(answer.map { String(describing: $0) } == String(describing: value), "\(type(of: view)).\(label)")
        }
        #expect(view.child(named: "noSuchName") == nil)
    }

    static var chart: ChartView {
        ChartView(
            points: [(t: hour, total: 1234, fatal: 5), (t: hour.addingTimeInterval(3600), total: 0, fatal: 0)], hourly: true)
    }

    static var seriesRow: SeriesRowView {
        SeriesRowView(label: "Nov 23 22:00", sessions: "1,234", crashed: "5", errored: "2", abnormal: "1")
    }

    @Test func rowsAnswerEveryPropertyLikeTheirMirror() {
        for bar in Self.chart.bars { Self.expectAnswersLikeMirror(bar, fields: 9) }
        Self.expectAnswersLikeMirror(Self.seriesRow, fields: 5)
        let totals = ReleaseTotals(version: "2.4.0", sessions: 1234, crashed: 5, errored: 2, abnormal: 1, users: 300, crashedUsers: 4)
        let figures = ReleaseFigures(totals, allSessions: 2000, seen: ReleaseSeen(first: Self.hour, last: Self.hour))
        Self.expectAnswersLikeMirror(
            ReleaseRowView(figures, href: "/projects/demo/releases/2.4.0", now: Self.hour.addingTimeInterval(7200)), fields: 9)
    }

    @Test func releaseTemplateShowsEveryBarAndSeriesRow() throws {
        let chart = Self.chart
        let view = ReleaseView(
            pageTitle: "2.4.0 · demo", nav: NavView(project: "demo", csrf: "c", overview: false, crashes: false, releases: true),
            project: "demo", version: "2.4.0", listHref: "/projects/demo/releases", windowLabel: "7 days", windows: [],
            environmentValue: nil, sessions: "1,234", crashFreeSessions: "99.59 %", crashFreeUsers: "98.66 %", crashed: "5",
            errored: "2", abnormal: "1", adoption: "61.70 %", chart: chart, hasSeries: true, series: [Self.seriesRow],
            hasTop: false, topGroups: [], hasIntroduced: false, introducedGroups: [], renderedAt: "2025-11-24 00:00 UTC")
        let html = try DashboardPages().render(view, "release")
        let first = chart.bars[0]
        #expect(html.contains("<title>Nov 23 22:00: 1,234 sessions, 5 crashed</title>"))
        #expect(
            html.contains(
                #"<rect class="bar nonfatal" x="\#(first.x)" y="\#(first.y)" width="\#(first.w)" height="\#(first.h)"/>"#
                    + #"<rect class="bar fatal" x="\#(first.x)" y="\#(first.fy)" width="\#(first.w)" height="\#(first.fh)"/>"#))
        #expect(html.contains("<title>Nov 23 23:00: 0 sessions, 0 crashed</title>"))
        #expect(
            html.contains(
                #"<tr><td class="when">Nov 23 22:00</td><td class="num">1,234</td><td class="num">5</td>"#
                    + #"<td class="num">2</td><td class="num">1</td></tr>"#))
    }
}
