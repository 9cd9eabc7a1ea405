import Foundation
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The release queries' storage (docs/release-health.md, "Storage"): answers read from the
/// deltas alone equal the answers read from the folded daily and hourly rollups, and both equal
/// what the sessions sent say, for windows of whole days, partial edge days and sub-hour edges;
/// a late final update is counted once whether its day was folded before or not. Each test has a
/// private database, so no other server folds its deltas while it looks at them.
@Suite struct SessionRollupTests {
    static let day = TimeWindow.floor(Date().addingTimeInterval(-5 * TimeWindow.day), TimeWindow.day)

    static func at(_ days: Double, _ hours: Double, _ minutes: Double = 0) -> Date {
        day.addingTimeInterval(days * TimeWindow.day + hours * 3600 + minutes * 60)
    }

    static func release(_ version: String, app: String = "com.acme.shop", environment: String = "production") -> SessionRelease {
        SessionRelease(appID: app, version: version, environment: environment)
    }

    static func update(
        _ n: Int, _ started: Date, _ status: SessionStatus, did: String? = nil, version: String = "2.4.0",
        app: String = "com.acme.shop", environment: String = "production", seq: Int64 = 1
    ) -> SessionUpdate {
        SessionUpdate(
            sid: UUID(uuidString: String(format: "7c7b6585-f901-4b34-a6d4-%012x", n))!, did: did, seq: seq, started: started,
            status: status, errors: 0, duration: nil,
            release: release(version, app: app, environment: environment))
    }

    /// Sessions over four days: every final state, two apps, two environments, two versions,
    /// users seen on several days, one session still open, and a Sentry aggregate.
    static let updates: [SessionUpdate] = [
        update(1, at(-1, 22, 30), .crashed, did: "a"),
        update(2, at(0, 1, 10), .ok, did: "b"),
        update(3, at(0, 13, 0), .errored, did: "a"),
        update(4, at(1, 5, 20), .crashed, did: "a"),
        update(5, at(1, 23, 50), .abnormal, did: "c"),
        update(6, at(2, 0, 5), .exited, did: "c"),
        update(7, at(2, 10, 40), .crashed, did: "d", app: "com.acme.widget"),
        update(8, at(1, 9, 0), .exited, did: "e", environment: "staging"),
        update(9, at(1, 9, 30), .crashed, did: "b", version: "2.3.0"),
        update(10, at(0, 0, 0), .exited, did: "f"),
        update(11, at(2, 11, 59), .exited),
    ]
    static let aggregates = [
        SessionAggregate(
            started: at(1, 12, 0), did: "g", exited: 3, errored: 1, abnormal: 0, crashed: 2, release: release("2.4.0"))
    ]

    /// Whole days, partial edge days, sub-hour edges, a window inside one day, and one inside an hour.
    static let windows: [TimeWindow] = [
        TimeWindow(from: at(-1, 22), to: at(2, 12)),
        TimeWindow(from: at(-1, 22, 45), to: at(2, 0, 10)),
        TimeWindow(from: at(0, 0), to: at(2, 0)),
        TimeWindow(from: at(0, 12), to: at(1, 6)),
        TimeWindow(from: at(1, 9, 10), to: at(1, 9, 40)),
        TimeWindow(from: at(-2, 0), to: at(3, 0)),
    ]
    static let filters = [
        SessionFilters(), SessionFilters(environment: "production"), SessionFilters(app: "com.acme.widget"),
        SessionFilters(environment: "staging", app: "com.acme.shop"),
    ]

    /// What the sessions sent say about `version` in `window` and `filters`, counted here.
    static func expected(
        _ version: String, _ window: TimeWindow, _ f: SessionFilters, crashedLate: Set<Int> = []
    )
        -> ReleaseTotals
    {
        var totals = ReleaseTotals(version: version)
        var users: Set<String> = []
        var crashedUsers: Set<String> = []
        func matches(_ r: SessionRelease, _ started: Date) -> Bool {
            r.version == version && started >= window.from && started < window.to
                && (f.environment == nil || r.environment == f.environment) && (f.app == nil || r.appID == f.app)
        }
        for (i, u) in updates.enumerated() where matches(u.release, u.started) {
            let status = crashedLate.contains(i + 1) ? .crashed : u.status
            totals.sessions += 1
            if let did = u.did { users.insert(did) }
            switch status {
            case .crashed:
                totals.crashed += 1
                if let did = u.did { crashedUsers.insert(did) }
            case .errored: totals.errored += 1
            case .abnormal: totals.abnormal += 1
            default: break
            }
        }
        for a in aggregates where matches(a.release, a.started) {
            totals.sessions += a.sessions
            totals.crashed += a.crashed
            totals.errored += a.errored
            totals.abnormal += a.abnormal
            if let did = a.did {
                users.insert(did)
                if a.crashed > 0 { crashedUsers.insert(did) }
            }
        }
        totals.users = Int64(users.count)
        totals.crashedUsers = Int64(crashedUsers.count)
        return totals
    }

    /// Every window and filter: the list's 2.4.0 and 2.3.0, the detail with both series.
    struct Answers: Equatable {
        var totals: [ReleaseTotals] = []
        var allSessions: [Int64] = []
        var series: [[ReleaseSeriesPoint]] = []
        var seen: [ReleaseSeen?] = []
    }

    static func answers(_ store: PostgresSessionStore, project: Int64) async throws -> Answers {
        var answers = Answers()
        for window in windows {
            for f in filters {
                let page = try await store.releasePage(project: project, window: window, filters: f, after: nil, limit: 50)
                for version in ["2.4.0", "2.3.0"] {
                    answers.totals.append(page.releases.first { $0.version == version } ?? ReleaseTotals(version: version))
                }
                answers.allSessions.append(page.allSessions)
                for interval in [StatsInterval.hour, .day] {
                    let detail = try await store.releaseDetail(
                        project: project, version: "2.4.0", window: window, filters: f, interval: interval)
                    answers.series.append(detail.series)
                    answers.seen.append(detail.seen)
                }
            }
        }
        return answers
    }

    static func expectedTotals(crashedLate: Set<Int> = []) -> [ReleaseTotals] {
        windows.flatMap { window in
            filters.flatMap { f in ["2.4.0", "2.3.0"].map { expected($0, window, f, crashedLate: crashedLate) } }
        }
    }

    static func projectID(_ config: ServerConfiguration, _ db: CrashDatabase) async throws -> Int64 {
        let slug = try await makeProject(config).project
        return try await db.client.query("SELECT id FROM projects WHERE slug = \(slug)", logger: TestEnvironment.logger)
            .collect().first!.decode(Int64.self)
    }

    static func count(_ db: CrashDatabase, _ table: String, project: Int64) async throws -> Int64 {
        try await db.client.query(
            PostgresQuery(unsafeSQL: "SELECT count(*)::bigint FROM \(table) WHERE project_id = $1", binds: binds(project)),
            logger: TestEnvironment.logger
        ).collect().first!.decode(Int64.self)
    }

    static func binds(_ value: Int64) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(value)
        return binds
    }

    /// Folds until no delta of `project` is left.
    static func fold(_ store: PostgresSessionStore, project: Int64) async throws {
        for _ in 0..<100 {
            _ = try await store.compactSessions(limit: 3)
            if try await count(store.database, "session_deltas", project: project) == 0 { return }
        }
        Issue.record("deltas left after 100 folds")
    }

    @Test func foldedDaysAndHoursAnswerAsTheDeltasAndTheSessionsSay() async throws {
        try await withPrivateDatabase("rh_rollup") { config in
            try await withTestDatabase(config) { db in
                let store = PostgresSessionStore(database: db)
                let project = try await Self.projectID(config, db)
                let outcomes = try await store.applySessions(project: project, updates: Self.updates, aggregates: Self.aggregates)
                #expect(outcomes.allSatisfy { $0 == .accepted })
                // Nothing folded yet: every answer comes from the deltas (and the raw edges).
                #expect(try await Self.count(db, "session_days", project: project) == 0)
                let unfolded = try await Self.answers(store, project: project)
                #expect(unfolded.totals == Self.expectedTotals())

                try await Self.fold(store, project: project)
                #expect(try await Self.count(db, "session_days", project: project) == 7)
                #expect(try await Self.count(db, "session_hours", project: project) == 12)
                let folded = try await Self.answers(store, project: project)
                #expect(folded.totals == Self.expectedTotals())
                #expect(folded == unfolded)
                // A series point per hour and per day, its sessions those of the list.
                let detail = try await store.releaseDetail(
                    project: project, version: "2.4.0", window: Self.windows[0], filters: SessionFilters(), interval: .day)
                #expect(detail.series.map(\.t) == (-1...2).map { Self.at(Double($0), 0) })
                #expect(detail.series.map(\.sessions) == [1, 3, 9, 3])
                #expect(detail.seen == ReleaseSeen(first: Self.at(-1, 22, 30), last: Self.at(2, 11, 59)))
            }
        }
    }

    /// A session's crash that arrives after its day was folded is counted once, folded or not,
    /// and its retry is a duplicate.
    @Test func aLateUpdateCountsOnceBeforeAndAfterFolding() async throws {
        try await withPrivateDatabase("rh_late") { config in
            try await withTestDatabase(config) { db in
                let store = PostgresSessionStore(database: db)
                let project = try await Self.projectID(config, db)
                _ = try await store.applySessions(project: project, updates: Self.updates, aggregates: Self.aggregates)
                try await Self.fold(store, project: project)
                let late = Self.update(2, Self.at(0, 1, 10), .crashed, did: "b", seq: 2)
                #expect(try await store.applySessions(project: project, updates: [late], aggregates: []) == [.accepted])
                // Pending as a delta beside the folded day.
                #expect(try await Self.count(db, "session_deltas", project: project) == 1)
                let pending = try await Self.answers(store, project: project)
                #expect(pending.totals == Self.expectedTotals(crashedLate: [2]))
                try await Self.fold(store, project: project)
                let folded = try await Self.answers(store, project: project)
                #expect(folded == pending)
                #expect(try await store.applySessions(project: project, updates: [late], aggregates: []) == [.duplicate])
                try await Self.fold(store, project: project)
                #expect(try await Self.answers(store, project: project) == folded)
            }
        }
    }

    /// Users over several days and hours: exact up to 250 (the union of the rows, not their
    /// sum), within 2 % beyond, and the same whether read from deltas or folded rollups.
    @Test(arguments: [200, 600])
    func usersAreTheUnionOfTheRowsFoldedOrNot(_ n: Int) async throws {
        try await withPrivateDatabase("rh_users") { config in
            try await withTestDatabase(config) { db in
                let store = PostgresSessionStore(database: db)
                let project = try await Self.projectID(config, db)
                // Each user on three days, in a different hour each day; a third of them crashed once.
                var updates: [SessionUpdate] = []
                for user in 0..<n {
                    for d in 0..<3 {
                        let status: SessionStatus = d == 1 && user % 3 == 0 ? .crashed : .exited
                        updates.append(
                            Self.update(
                                100_000 * d + user, Self.at(Double(d), Double(user % 24), 15), status, did: "user-\(user)"))
                    }
                }
                for chunk in stride(from: 0, to: updates.count, by: 1000) {
                    _ = try await store.applySessions(
                        project: project, updates: Array(updates[chunk..<min(chunk + 1000, updates.count)]), aggregates: [])
                }
                let window = TimeWindow(from: Self.at(0, 0), to: Self.at(3, 0))
                func read() async throws -> ReleaseTotals {
                    try await store.releasePage(project: project, window: window, filters: SessionFilters(), after: nil, limit: 10)
                        .releases.first!
                }
                let unfolded = try await read()
                try await Self.fold(store, project: project)
                let folded = try await read()
                #expect(folded == unfolded)
                #expect(folded.sessions == Int64(3 * n))
                let crashed = (n + 2) / 3
                if n <= 250 {
                    #expect(folded.users == Int64(n))
                    #expect(folded.crashedUsers == Int64(crashed))
                } else {
                    #expect(abs(Double(folded.users - Int64(n))) <= 0.02 * Double(n), "\(folded.users)")
                    #expect(folded.crashedUsers == Int64(crashed))
                }
            }
        }
    }
}
