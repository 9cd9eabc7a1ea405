import Foundation
import NIOCore
import PostgresNIO
import Synchronization
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

    /// The user sets a store keeps between queries (``RollupUserSets``) are those of the rows in
    /// the versions read: once late sessions change weekly and daily rows, a store that has
    /// answered before answers as a store that never did, and the users it answers moved.
    @Test func keptUserSetsFollowTheRowsTheyCameFrom() async throws {
        try await withPrivateDatabase("rh_user_sets") { config in
            try await withTestDatabase(config) { db in
                let store = PostgresSessionStore(database: db)
                let project = try await SessionRollupTests.projectID(config, db)
                _ = try await store.applySessions(project: project, updates: Self.updates, aggregates: [])
                try await Self.foldAll(store, project: project)
                let before = try await Self.answers(store, project: project)
                #expect(try await Self.answers(store, project: project) == before)
                #expect(store.userSets.bytes > 0)

                // 400 new users of 2.4.0 over the first two weeks: rows the kept sets came from change.
                let late = (0..<400).map { i in
                    SessionRollupTests.update(
                        10_000 + i, Self.start.addingTimeInterval(Double(i) * 3000 + 60), .crashed, did: "late-\(i)")
                }
                _ = try await store.applySessions(project: project, updates: late, aggregates: [])
                try await Self.foldAll(store, project: project)
                let after = try await Self.answers(store, project: project)
                #expect(after == (try await Self.answers(PostgresSessionStore(database: db), project: project)))
                #expect(after[0].detail.users > before[0].detail.users + 300)
                #expect(after[0].detail.crashedUsers > before[0].detail.crashedUsers + 300)
            }
        }
    }

    /// Folds every delta of `project`, however many, waiting out a fold of another test's
    /// store that holds the compaction lock.
    static func foldAll(_ store: PostgresSessionStore, project: Int64) async throws {
        for _ in 0..<1000 {
            _ = try await store.compactSessions(limit: 500)
            if try await SessionRollupTests.count(store.database, "session_deltas", project: project) == 0 { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("deltas left after 1000 folds")
    }

    /// A kept union is used only for the same rows in the same versions, for as long as its
    /// age allows, and the cache keeps to its budget, dropping the least recently used first.
    @Test func userSetsAreKeptByStampAgeAndBudget() {
        let clock = Mutex(ContinuousClock.now)
        let sets = RollupUserSets(budget: 3 * UserSketch.registerCount, maxAge: .seconds(60)) { clock.withLock { $0 } }
        func key(_ version: String) -> RollupUserSets.Key {
            RollupUserSets.Key(piece: 0, from: Self.start, to: Self.now, project: 1, version: version, filters: SessionFilters())
        }
        let stamp: RollupUserSets.Stamps = #"{"(\"2026-11-02 00:00:00+00\",a,production,7)"}"#
        var sketch = RollupUserSets.Sets()
        for i in 0..<300 { sketch.users.insert(Int64(i) &* Int64(bitPattern: 0x9E37_79B9_7F4A_7C15)) }
        #expect(sketch.users.isSketch)

        sets.store(key("1"), stamps: stamp, sets: sketch)
        #expect(sets.sets(key("1"), stamps: stamp)?.users == sketch.users)
        let changed: RollupUserSets.Stamps = #"{"(\"2026-11-02 00:00:00+00\",a,production,8)"}"#
        #expect(sets.sets(key("1"), stamps: changed) == nil)
        #expect(sets.sets(key("1"), stamps: stamp) == nil)  // dropped with the stale entry

        sets.store(key("1"), stamps: stamp, sets: sketch)
        clock.withLock { $0 = $0.advanced(by: .seconds(61)) }
        #expect(sets.sets(key("1"), stamps: stamp) == nil)

        // Room for two sketches: a third drops the least recently used.
        sets.store(key("1"), stamps: stamp, sets: sketch)
        sets.store(key("2"), stamps: stamp, sets: sketch)
        #expect(sets.sets(key("1"), stamps: stamp) != nil)
        sets.store(key("3"), stamps: stamp, sets: sketch)
        #expect(sets.sets(key("2"), stamps: stamp) == nil)
        #expect(sets.sets(key("1"), stamps: stamp) != nil)
        #expect(sets.sets(key("3"), stamps: stamp) != nil)
        #expect(sets.bytes <= sets.budget)
    }
}
