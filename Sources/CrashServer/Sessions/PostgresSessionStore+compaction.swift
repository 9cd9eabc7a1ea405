import Foundation
import NIOCore
import PostgresNIO

extension PostgresSessionStore {
    /// The advisory lock that lets one server at a time fold deltas: two folds of the same
    /// rows would only wait for each other's row locks.
    static let compactionLockID: Int64 = 0x6372_7365_7373_636D  // "crsesscm"

    /// Seconds in a rollup week: weeks start at the Unix epoch (a Thursday, 00:00 UTC).
    static let week: Double = 7 * TimeWindow.day

    /// One transaction: takes (deletes) up to `limit` rows of `session_deltas`, adds them to
    /// their hour's row of `session_hours`, their day's row of `session_days` and their week's
    /// row of `session_weeks`, and commits. A read snapshot sees each delta either as a delta or
    /// inside every rollup, never both. The first fold builds the weeks from the days
    /// (``buildWeeksOnce(_:)``).
    func compactSessions(limit: Int) async throws -> Int {
        try await database.client.withTransactionEndingOnClose(logger: logger) { connection in
            var locked = false
            for try await got in try await connection.query(
                "SELECT pg_try_advisory_xact_lock(\(Self.compactionLockID))", logger: logger
            ).decode(Bool.self) { locked = got }
            guard locked else { return 0 }
            try await buildWeeksOnce(connection)
            let rows = try await connection.query(
                """
                DELETE FROM session_deltas
                WHERE ctid = ANY(ARRAY(SELECT ctid FROM session_deltas LIMIT \(limit)))
                RETURNING project_id, hour, app_id, version, environment, started, crashed, errored, abnormal, first_started,
                          last_started, users, crashed_users
                """, logger: logger)
            var hours: [SessionRollupKey: SessionRollup] = [:]
            var days: [SessionRollupKey: SessionRollup] = [:]
            var weeks: [SessionRollupKey: SessionRollup] = [:]
            var folded = 0
            for try await row in rows.decode(
                (Int64, Date, String, String, String, Int64, Int64, Int64, Int64, Date?, Date?, ByteBuffer, ByteBuffer).self)
            {
                let (project, hour, app, version, environment, started, crashed, errored, abnormal, first, last, users, crashedUsers) =
                    row
                let release = SessionRelease(appID: app, version: version, environment: environment)
                let delta = SessionRollup(
                    started: started, crashed: crashed, errored: errored, abnormal: abnormal, firstSeen: first, lastSeen: last,
                    users: SessionUsers(encoded: users), crashedUsers: SessionUsers(encoded: crashedUsers))
                hours[SessionRollupKey(project: project, release: release, time: hour), default: SessionRollup()].merge(delta)
                days[
                    SessionRollupKey(project: project, release: release, time: TimeWindow.floor(hour, TimeWindow.day)),
                    default: SessionRollup()
                ].merge(delta)
                weeks[SessionRollupKey(project: project, release: release, time: TimeWindow.floor(hour, Self.week)), default: SessionRollup()]
                    .merge(delta)
                folded += 1
            }
            guard folded > 0 else { return 0 }
            try await fold(hours, into: .hours, connection)
            try await fold(days, into: .days, connection)
            try await fold(weeks, into: .weeks, connection)
            return folded
        }
    }

    /// The mark that says `session_weeks` holds every folded day.
    static let weeksMark = "weeks"

    /// Builds `session_weeks` from `session_days` unless marked built, then marks it, in the
    /// caller's compaction transaction (which holds the compaction lock, so no delta is
    /// folded meanwhile and none is counted twice). Rows are read one at a time and merged
    /// into their week.
    func buildWeeksOnce(_ connection: PostgresConnection) async throws {
        guard try await !weeksReady(on: connection) else { return }
        let rows = try await connection.query(
            """
            SELECT project_id, day, app_id, version, environment, started, crashed, errored, abnormal, first_started,
                   last_started, users, crashed_users
            FROM session_days
            """, logger: logger)
        var weeks: [SessionRollupKey: SessionRollup] = [:]
        for try await row in rows.decode(
            (Int64, Date, String, String, String, Int64, Int64, Int64, Int64, Date?, Date?, ByteBuffer, ByteBuffer).self)
        {
            let (project, day, app, version, environment, started, crashed, errored, abnormal, first, last, users, crashedUsers) = row
            let release = SessionRelease(appID: app, version: version, environment: environment)
            weeks[SessionRollupKey(project: project, release: release, time: TimeWindow.floor(day, Self.week)), default: SessionRollup()]
                .merge(
                    SessionRollup(
                        started: started, crashed: crashed, errored: errored, abnormal: abnormal, firstSeen: first, lastSeen: last,
                        users: SessionUsers(encoded: users), crashedUsers: SessionUsers(encoded: crashedUsers)))
        }
        if !weeks.isEmpty { try await fold(weeks, into: .weeks, connection) }
        try await connection.query(
            "INSERT INTO session_rollup_marks (name) VALUES (\(Self.weeksMark)) ON CONFLICT DO NOTHING", logger: logger)
        logger.info("session weeks built from the daily rollups", metadata: ["rollups.weeks": "\(weeks.count)"])
    }

    /// Whether `session_weeks` may be read (built and kept by the compaction).
    func weeksReady(on connection: PostgresConnection) async throws -> Bool {
        var ready = false
        for try await _ in try await connection.query(
            "SELECT 1 FROM session_rollup_marks WHERE name = \(Self.weeksMark)", logger: logger
        ).decode(Int.self) { ready = true }
        return ready
    }

    enum RollupTable: String {
        case hours = "session_hours"
        case days = "session_days"
        case weeks = "session_weeks"

        var timeColumn: String {
            switch self {
            case .hours: "hour"
            case .days: "day"
            case .weeks: "week"
            }
        }
    }

    /// Adds `rollups` to the rows of `table`: the rows that exist are locked (in key order) and
    /// read, merged with their deltas here (the users are a union or a sketch merge, which SQL
    /// cannot do), and written back whole.
    private func fold(
        _ rollups: [SessionRollupKey: SessionRollup], into table: RollupTable, _ connection: PostgresConnection
    ) async throws {
        var merged = rollups
        let keys = rollups.keys.sorted()
        let existing = try await connection.query(
            """
            SELECT t.project_id, t.\(unescaped: table.timeColumn), t.app_id, t.version, t.environment, t.started, t.crashed,
                   t.errored, t.abnormal, t.first_started, t.last_started, t.users, t.crashed_users
            FROM unnest(\(keys.map(\.project))::bigint[], \(keys.map(\.time))::timestamptz[], \(keys.map(\.release.appID))::text[],
                        \(keys.map(\.release.version))::text[], \(keys.map(\.release.environment))::text[]) WITH ORDINALITY
                 AS k(p, t, a, v, e, n)
            CROSS JOIN LATERAL (
                SELECT * FROM \(unescaped: table.rawValue) r
                WHERE r.project_id = k.p AND r.\(unescaped: table.timeColumn) = k.t AND r.app_id = k.a AND r.version = k.v
                  AND r.environment = k.e
                FOR UPDATE
            ) t
            ORDER BY k.n
            """, logger: logger)
        for try await row in existing.decode(
            (Int64, Date, String, String, String, Int64, Int64, Int64, Int64, Date?, Date?, ByteBuffer, ByteBuffer).self)
        {
            let (project, time, app, version, environment, started, crashed, errored, abnormal, first, last, users, crashedUsers) = row
            let key = SessionRollupKey(
                project: project, release: SessionRelease(appID: app, version: version, environment: environment), time: time)
            merged[key]?.merge(
                SessionRollup(
                    started: started, crashed: crashed, errored: errored, abnormal: abnormal, firstSeen: first, lastSeen: last,
                    users: SessionUsers(encoded: users), crashedUsers: SessionUsers(encoded: crashedUsers)))
        }
        let values = keys.map { merged[$0]! }
        try await connection.query(
            """
            INSERT INTO \(unescaped: table.rawValue) AS r (project_id, \(unescaped: table.timeColumn), app_id, version, environment,
                started, crashed, errored, abnormal, first_started, last_started, users, crashed_users)
            SELECT p, t, a, v, e, s, c, er, ab, CASE WHEN s > 0 THEN f END, CASE WHEN s > 0 THEN l END, u, cu
            FROM unnest(\(keys.map(\.project))::bigint[], \(keys.map(\.time))::timestamptz[],
                                 \(keys.map(\.release.appID))::text[], \(keys.map(\.release.version))::text[],
                                 \(keys.map(\.release.environment))::text[], \(values.map(\.started))::bigint[],
                                 \(values.map(\.crashed))::bigint[], \(values.map(\.errored))::bigint[],
                                 \(values.map(\.abnormal))::bigint[], \(values.map { $0.firstSeen ?? .distantPast })::timestamptz[],
                                 \(values.map { $0.lastSeen ?? .distantPast })::timestamptz[], \(values.map(\.users.encoded))::bytea[],
                                 \(values.map(\.crashedUsers.encoded))::bytea[]) AS x(p, t, a, v, e, s, c, er, ab, f, l, u, cu)
            ON CONFLICT (project_id, \(unescaped: table.timeColumn), app_id, version, environment) DO UPDATE SET
                started = excluded.started, crashed = excluded.crashed, errored = excluded.errored, abnormal = excluded.abnormal,
                first_started = excluded.first_started, last_started = excluded.last_started, users = excluded.users,
                crashed_users = excluded.crashed_users
            """, logger: logger)
    }
}
