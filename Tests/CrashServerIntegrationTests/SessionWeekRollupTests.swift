import Foundation
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The weekly rollups (docs/release-health.md, "Storage"): a long window read from whole weeks
/// and the days around them answers exactly as the same window read from the days alone and
/// from the unfolded deltas (counts exact; users exact up to 250, then the same merged sketch),
/// and weeks built from the days of a database folded before they existed answer the same.
/// A private database: no other server folds its deltas while the test looks at them.
@Suite struct SessionWeekRollupTests {
    static let now = Date()
    static let start = TimeWindow.floor(now.addingTimeInterval(-29 * TimeWindow.day), TimeWindow.day)

    /// Six sessions a day for 29 days: two versions, two environments, every final state, 300
    /// users (past the exact 250: the sketch) over 2.4.0 and 2.3.0.
    static let updates: [SessionUpdate] = (0..<(29 * 6)).map { i in
        let statuses: [SessionStatus] = [.exited, .exited, .crashed, .errored, .abnormal, .exited]
        return SessionRollupTests.update(
            i + 1, start.addingTimeInterval(Double(i) * 4 * 3600 + 17 * 60), statuses[i % statuses.count],
            did: "user-\(i * 7 % 300)", version: i % 3 == 0 ? "2.3.0" : "2.4.0",
            environment: i % 5 == 0 ? "staging" : "production")
    }

    /// 30 days to now, two weeks, nine days and a bit, a window of whole weeks' edges inside.
    static let windows: [TimeWindow] = [
        TimeWindow(from: now.addingTimeInterval(-30 * TimeWindow.day), to: now),
        TimeWindow(from: now.addingTimeInterval(-14 * TimeWindow.day), to: now),
        TimeWindow(from: now.addingTimeInterval(-9 * TimeWindow.day - 5 * 3600), to: now.addingTimeInterval(-3600)),
        TimeWindow(from: start.addingTimeInterval(3.5 * TimeWindow.day), to: start.addingTimeInterval(26.2 * TimeWindow.day)),
    ]

    struct Answer: Equatable {
        var releases: [ReleaseTotals]
        var allSessions: Int64
        var detail: ReleaseTotals
    }

    static func answers(_ store: PostgresSessionStore, project: Int64) async throws -> [Answer] {
        var answers: [Answer] = []
        for window in windows {
            for f in [SessionFilters(), SessionFilters(environment: "production")] {
                let page = try await store.releasePage(project: project, window: window, filters: f, after: nil, limit: 50)
                let detail = try await store.releaseDetail(project: project, version: "2.4.0", window: window, filters: f, interval: .day)
                answers.append(Answer(releases: page.releases, allSessions: page.allSessions, detail: detail.totals))
            }
        }
        return answers
    }

    @Test func weeksAnswerAsTheDaysAndTheDeltas() async throws {
        // The windows of two weeks and more hold whole weeks: the weeks are read.
        for window in [Self.windows[0], Self.windows[1], Self.windows[3]] {
            let weeks = SessionReadPlan(window, weeks: true).weeks
            #expect(weeks.0 < weeks.1)
        }
        try await withPrivateDatabase("rh_weeks") { config in
            try await withTestDatabase(config) { db in
                let store = PostgresSessionStore(database: db)
                let project = try await SessionRollupTests.projectID(config, db)
                let outcomes = try await store.applySessions(project: project, updates: Self.updates, aggregates: [])
                #expect(outcomes.allSatisfy { $0 == .accepted })
                let unfolded = try await Self.answers(store, project: project)
                #expect(unfolded[0].allSessions == Int64(Self.updates.count))
                #expect(unfolded[0].releases.map(\.users).allSatisfy { $0 > 0 })

                try await SessionRollupTests.fold(store, project: project)
                #expect(try await SessionRollupTests.count(db, "session_weeks", project: project) > 0)
                let weekly = try await Self.answers(store, project: project)
                #expect(weekly == unfolded)

                // The same windows from the daily rows alone (the weeks not marked ready).
                try await db.client.query("DELETE FROM session_rollup_marks", logger: TestEnvironment.logger)
                #expect(try await Self.answers(store, project: project) == weekly)

                // Weeks built afresh from the days (a database folded before they existed).
                try await db.client.query("DELETE FROM session_weeks", logger: TestEnvironment.logger)
                _ = try await store.compactSessions(limit: 1)
                #expect(try await SessionRollupTests.count(db, "session_weeks", project: project) > 0)
                #expect(try await Self.answers(store, project: project) == weekly)
            }
        }
    }
}
