import Foundation
import NIOCore
import PostgresNIO

/// The pieces a window is read from: whole rollup weeks from `session_weeks` (when `weeks`),
/// the whole UTC days around them from `session_days`, the whole hours of its partial edge
/// days from `session_hours`, the deltas of every whole hour not folded yet from
/// `session_deltas`, and the sub-hour edges from the sessions and aggregates themselves.
/// Empty pieces are `(x, x)`.
struct SessionReadPlan: Sendable {
    /// The whole days, before and after the whole weeks.
    var days: [(Date, Date)]
    var weeks: (Date, Date)
    var hours: [(Date, Date)]
    var deltas: (Date, Date)
    var raw: [(Date, Date)]

    init(_ window: TimeWindow, weeks useWeeks: Bool) {
        self.init(window)
        guard useWeeks else { return }
        let (d0, d1) = (days[0].0, days[0].1)
        let w0 = TimeWindow.ceil(d0, PostgresSessionStore.week)
        let w1 = TimeWindow.floor(d1, PostgresSessionStore.week)
        if w0 < w1 {
            weeks = (w0, w1)
            days = [(d0, w0), (w1, d1)]
        }
    }

    /// The pieces read from the rollup tables with users, in ``RollupUserSets``' numbering:
    /// 0 the weeks, 1 and 2 the days, 3 and 4 the hours.
    var rollupPieces: [(Date, Date)] { [weeks, days[0], days[1], hours[0], hours[1]] }

    private init(_ window: TimeWindow) {
        let (from, to) = (window.from, window.to)
        let h0 = TimeWindow.ceil(from, TimeWindow.hour)
        let h1 = TimeWindow.floor(to, TimeWindow.hour)
        weeks = (to, to)
        guard h0 < h1 else {
            (days, hours, deltas, raw) = ([(to, to), (to, to)], [(to, to), (to, to)], (to, to), [(from, to), (to, to)])
            return
        }
        raw = [(from, h0), (h1, to)]
        deltas = (h0, h1)
        let d0 = TimeWindow.ceil(h0, TimeWindow.day)
        let d1 = TimeWindow.floor(h1, TimeWindow.day)
        if d0 < d1 {
            days = [(d0, d1), (d1, d1)]
            hours = [(h0, d0), (d1, h1)]
        } else {
            days = [(h1, h1), (h1, h1)]
            hours = [(h0, h1), (h1, h1)]
        }
    }
}

extension PostgresSessionStore {
    func releasePage(
        project: Int64, window: TimeWindow, filters: SessionFilters, after: ReleaseTotals?, limit: Int
    ) async throws -> ReleasePage {
        try await database.withReadSnapshot { connection in
            let plan = SessionReadPlan(window, weeks: try await weeksReady(on: connection))
            let totals = try await releaseCounts(project: project, plan: plan, filters: filters, on: connection)
            let all = totals.reduce(0) { $0 + $1.sessions }
            var ordered = totals.sorted(by: ReleaseTotals.before)
            if let after { ordered = ordered.filter { ReleaseTotals.before(after, $0) } }
            var page = Array(ordered.prefix(limit))
            let users = try await releaseUsers(
                project: project, plan: plan, filters: filters, versions: page.map(\.version), on: connection)
            for i in page.indices {
                page[i].users = users[page[i].version]?.users ?? 0
                page[i].crashedUsers = users[page[i].version]?.crashedUsers ?? 0
            }
            let seen = try await releaseSeen(project: project, filters: filters, versions: page.map(\.version), on: connection)
            return ReleasePage(releases: page, allSessions: all, seen: seen, next: ordered.count > limit ? page.last : nil)
        }
    }

    func releaseDetail(
        project: Int64, version: String, window: TimeWindow, filters: SessionFilters, interval: StatsInterval
    ) async throws -> ReleaseDetail {
        try await database.withReadSnapshot { connection in
            let plan = SessionReadPlan(window, weeks: try await weeksReady(on: connection))
            let totals = try await releaseCounts(project: project, plan: plan, filters: filters, on: connection)
            var mine = totals.first { $0.version == version } ?? ReleaseTotals(version: version)
            if mine.sessions > 0 {
                let users = try await releaseUsers(project: project, plan: plan, filters: filters, versions: [version], on: connection)
                mine.users = users[version]?.users ?? 0
                mine.crashedUsers = users[version]?.crashedUsers ?? 0
            }
            let seen = try await releaseSeen(project: project, filters: filters, versions: [version], on: connection)
            let series = try await releaseSeries(
                project: project, version: version, window: window, interval: interval, filters: filters, on: connection)
            return ReleaseDetail(
                totals: mine, allSessions: totals.reduce(0) { $0 + $1.sessions }, seen: seen[version], series: series)
        }
    }

    /// Each version's counts in the window of `p` (users not yet), the versions with sessions only.
    func releaseCounts(
        project: Int64, plan p: SessionReadPlan, filters f: SessionFilters, on connection: PostgresConnection
    ) async throws -> [ReleaseTotals] {
        let (d0, d1) = p.days[0], (d2, d3) = p.days[1], (w0, w1) = p.weeks, (a0, a1) = p.hours[0], (b0, b1) = p.hours[1], (h0, h1) = p.deltas
        let (r0, r1) = p.raw[0], (r2, r3) = p.raw[1]
        let rows = try await connection.query(
            """
            SELECT version, sum(n)::bigint, sum(c)::bigint, sum(er)::bigint, sum(ab)::bigint FROM (
                SELECT version, started AS n, crashed AS c, errored AS er, abnormal AS ab FROM session_weeks
                WHERE project_id = \(project) AND week >= \(w0) AND week < \(w1)
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, started, crashed, errored, abnormal FROM session_days
                WHERE project_id = \(project) AND ((day >= \(d0) AND day < \(d1)) OR (day >= \(d2) AND day < \(d3)))
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, started, crashed, errored, abnormal FROM session_hours
                WHERE project_id = \(project) AND ((hour >= \(a0) AND hour < \(a1)) OR (hour >= \(b0) AND hour < \(b1)))
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, started, crashed, errored, abnormal FROM session_deltas
                WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1)
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, 1, (status = 'crashed')::int, (status = 'errored')::int, (status = 'abnormal')::int
                FROM session_states
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, sessions, crashed, errored, abnormal FROM session_aggregates
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND \(sessionFilter: f)
            ) r
            GROUP BY version HAVING sum(n) > 0
            """, logger: logger)
        var totals: [ReleaseTotals] = []
        for try await (v, n, c, er, ab) in rows.decode((String, Int64, Int64, Int64, Int64).self) {
            totals.append(ReleaseTotals(version: v, sessions: n, crashed: c, errored: er, abnormal: ab))
        }
        return totals
    }

    /// Users and crashed users of `versions` in the window of `p`: the union of the users of
    /// every row and session read, exact while at most 250, else a merged sketch's estimate.
    /// The weekly, daily and hourly rows come through ``rollupUsers(project:plan:filters:versions:on:)``.
    func releaseUsers(
        project: Int64, plan p: SessionReadPlan, filters f: SessionFilters, versions: [String], on connection: PostgresConnection
    ) async throws -> [String: (users: Int64, crashedUsers: Int64)] {
        guard !versions.isEmpty else { return [:] }
        // Merged in place (`default:`): a copy of a set holding a sketch would copy its 16 KB.
        var users: [String: SessionUsers] = [:]
        var crashedUsers: [String: SessionUsers] = [:]
        for (version, pieces) in try await rollupUsers(project: project, plan: p, filters: f, versions: versions, on: connection) {
            for sets in pieces {
                users[version, default: SessionUsers()].merge(sets.users)
                crashedUsers[version, default: SessionUsers()].merge(sets.crashedUsers)
            }
        }
        let (h0, h1) = p.deltas, (r0, r1) = p.raw[0], (r2, r3) = p.raw[1]
        // The sub-hour edges' users come as one row per version with their hashes in arrays:
        // an edge of up to an hour holds about 14,000 sessions at 10 M a month, and a row each
        // cost the server more to decode than PostgreSQL to read.
        let rows = try await connection.query(
            """
            SELECT version, users, crashed_users, NULL::bigint[], NULL::bigint[] FROM session_deltas
            WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1) AND version = ANY(\(versions)::text[])
              AND \(sessionFilter: f)
            UNION ALL
            SELECT version, NULL, NULL, array_agg(did_hash), array_agg(did_hash) FILTER (WHERE crashed) FROM (
                SELECT version, did_hash, status = 'crashed' AS crashed FROM session_states
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND did_hash IS NOT NULL AND version = ANY(\(versions)::text[])
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT version, did_hash, crashed > 0 FROM session_aggregates
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND did_hash IS NOT NULL AND version = ANY(\(versions)::text[])
                  AND \(sessionFilter: f)
            ) s
            GROUP BY version
            """, logger: logger)
        for try await (version, stored, storedCrashed, hashes, crashedHashes) in rows.decode(
            (String, ByteBuffer?, ByteBuffer?, [Int64]?, [Int64]?).self)
        {
            if let stored { users[version, default: SessionUsers()].merge(encoded: stored) }
            if let storedCrashed { crashedUsers[version, default: SessionUsers()].merge(encoded: storedCrashed) }
            for hash in hashes ?? [] { users[version, default: SessionUsers()].insert(hash) }
            for hash in crashedHashes ?? [] { crashedUsers[version, default: SessionUsers()].insert(hash) }
        }
        return users.mapValues { ($0.count, 0) }.merging(crashedUsers.mapValues { (0, $0.count) }) { ($0.0, $1.1) }
    }

    /// The user sets of the weekly, daily and hourly rows of `p`, per version and piece of the
    /// plan (``SessionReadPlan/rollupPieces``): the rows' stamps (key and `xmin`) are read
    /// first, one text per piece and version, and only the pieces whose rows ``userSets`` does
    /// not hold in those versions are read and decoded, then kept there under the stamps read.
    /// Both reads are in the caller's snapshot, so the stamps are those of the rows decoded.
    func rollupUsers(
        project: Int64, plan p: SessionReadPlan, filters f: SessionFilters, versions: [String], on connection: PostgresConnection
    ) async throws -> [String: [RollupUserSets.Sets]] {
        let pieces = p.rollupPieces
        func key(_ piece: Int64, _ version: String) -> RollupUserSets.Key {
            let range = pieces[Int(piece)]
            return RollupUserSets.Key(piece: piece, from: range.0, to: range.1, project: project, version: version, filters: f)
        }
        var stamps: [RollupUserSets.Key: RollupUserSets.Stamps] = [:]
        let stampRows = try await connection.query(
            rollupPiecesQuery(
                project: project, plan: p, filters: f, versions: Array(repeating: versions, count: pieces.count), sets: false),
            logger: logger)
        for try await (piece, version, rows) in stampRows.decode((Int64, String, String).self) {
            stamps[key(piece, version)] = rows
        }
        var found: [String: [RollupUserSets.Sets]] = [:]
        var missing = Array(repeating: [String](), count: pieces.count)
        for (key, rows) in stamps {
            if let sets = userSets.sets(key, stamps: rows) {
                found[key.version, default: []].append(sets)
            } else {
                missing[Int(key.piece)].append(key.version)
            }
        }
        guard missing.contains(where: { !$0.isEmpty }) else { return found }
        var read: [RollupUserSets.Key: RollupUserSets.Sets] = [:]
        let rows = try await connection.query(
            rollupPiecesQuery(project: project, plan: p, filters: f, versions: missing, sets: true), logger: logger)
        for try await (piece, version, users, crashedUsers) in rows.decode((Int64, String, ByteBuffer, ByteBuffer).self) {
            let key = key(piece, version)
            read[key, default: .init()].users.merge(encoded: users)
            read[key, default: .init()].crashedUsers.merge(encoded: crashedUsers)
        }
        for (key, sets) in read {
            if let rows = stamps[key] { userSets.store(key, stamps: rows, sets: sets) }
            found[key.version, default: []].append(sets)
        }
        return found
    }

    /// The rows of the plan's weekly, daily and hourly pieces for `versions[piece]`: with `sets`
    /// each row's piece (0 to 4, ``SessionReadPlan/rollupPieces``), version, users and crashed
    /// users; without, one row per piece and version with the text of its rows' stamps (bucket,
    /// app, environment and `xmin`, in that order): about 2,000 rows in a 30-day list at 10 M
    /// sessions a month, which the server decoded each at more cost than PostgreSQL's to read.
    private func rollupPiecesQuery(
        project: Int64, plan p: SessionReadPlan, filters f: SessionFilters, versions v: [[String]], sets: Bool
    ) -> PostgresQuery {
        let (w0, w1) = p.weeks, (d0, d1) = p.days[0], (d2, d3) = p.days[1], (a0, a1) = p.hours[0], (b0, b1) = p.hours[1]
        let select =
            sets
            ? "SELECT piece, version, users, crashed_users FROM ("
            : "SELECT piece, version, array_agg((bucket, app_id, environment, x) ORDER BY bucket, app_id, environment, x)::text FROM ("
        let group = sets ? ") r" : ") r GROUP BY piece, version"
        return """
            \(unescaped: select)
            SELECT 0::int8 AS piece, version, week AS bucket, app_id, environment, xmin::text::int8 AS x,
                   CASE WHEN \(sets) THEN users END AS users, CASE WHEN \(sets) THEN crashed_users END AS crashed_users
            FROM session_weeks
            WHERE project_id = \(project) AND week >= \(w0) AND week < \(w1) AND version = ANY(\(v[0])::text[])
              AND \(sessionFilter: f)
            UNION ALL
            SELECT CASE WHEN day < \(d1) THEN 1 ELSE 2 END::int8, version, day, app_id, environment, xmin::text::int8,
                   CASE WHEN \(sets) THEN users END, CASE WHEN \(sets) THEN crashed_users END
            FROM session_days
            WHERE project_id = \(project)
              AND ((day >= \(d0) AND day < \(d1) AND version = ANY(\(v[1])::text[]))
                   OR (day >= \(d2) AND day < \(d3) AND version = ANY(\(v[2])::text[])))
              AND \(sessionFilter: f)
            UNION ALL
            SELECT CASE WHEN hour < \(a1) THEN 3 ELSE 4 END::int8, version, hour, app_id, environment, xmin::text::int8,
                   CASE WHEN \(sets) THEN users END, CASE WHEN \(sets) THEN crashed_users END
            FROM session_hours
            WHERE project_id = \(project)
              AND ((hour >= \(a0) AND hour < \(a1) AND version = ANY(\(v[3])::text[]))
                   OR (hour >= \(b0) AND hour < \(b1) AND version = ANY(\(v[4])::text[])))
              AND \(sessionFilter: f)
            \(unescaped: group)
            """
    }

    /// Earliest and latest `started` of each of `versions` over all time, under the filters:
    /// the version's first and last day (two index probes, whatever its age) and its deltas.
    func releaseSeen(
        project: Int64, filters f: SessionFilters, versions: [String], on connection: PostgresConnection
    ) async throws -> [String: ReleaseSeen] {
        guard !versions.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT v.version, least(f.first, d.first), greatest(l.last, d.last) FROM unnest(\(versions)::text[]) AS v(version)
            LEFT JOIN LATERAL (
                SELECT first_started AS first FROM session_days
                WHERE project_id = \(project) AND version = v.version AND first_started IS NOT NULL
                  AND \(sessionFilter: f)
                ORDER BY day, first_started LIMIT 1
            ) f ON true
            LEFT JOIN LATERAL (
                SELECT last_started AS last FROM session_days
                WHERE project_id = \(project) AND version = v.version AND last_started IS NOT NULL
                  AND \(sessionFilter: f)
                ORDER BY day DESC, last_started DESC LIMIT 1
            ) l ON true
            LEFT JOIN LATERAL (
                SELECT min(first_started) AS first, max(last_started) AS last FROM session_deltas
                WHERE project_id = \(project) AND version = v.version
                  AND \(sessionFilter: f)
            ) d ON true
            """, logger: logger)
        var seen: [String: ReleaseSeen] = [:]
        for try await (version, first, last) in rows.decode((String, Date?, Date?).self) {
            if let first, let last { seen[version] = ReleaseSeen(first: first, last: last) }
        }
        return seen
    }

    /// The series of `version`: one point per `interval` from `window.from` (floored) to
    /// `window.to`, zero-filled. By day, whole days read `session_days` and the last, partial day
    /// its hours; by hour, `session_hours`; both add the deltas not folded yet.
    func releaseSeries(
        project: Int64, version: String, window: TimeWindow, interval: StatsInterval, filters f: SessionFilters,
        on connection: PostgresConnection
    ) async throws -> [ReleaseSeriesPoint] {
        let buckets = window.buckets(interval.seconds)
        let from = buckets.first ?? window.from
        let to = window.to
        // Whole days read from session_days (none by hour); the hours from there to `to`.
        let daysEnd = interval == .day ? max(from, TimeWindow.floor(to, TimeWindow.day)) : from
        let rows = try await connection.query(
            """
            SELECT t, sum(n)::bigint, sum(c)::bigint, sum(er)::bigint, sum(ab)::bigint FROM (
                SELECT day AS t, started AS n, crashed AS c, errored AS er, abnormal AS ab FROM session_days
                WHERE project_id = \(project) AND version = \(version) AND day >= \(from) AND day < \(daysEnd)
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT hour, started, crashed, errored, abnormal FROM session_hours
                WHERE project_id = \(project) AND version = \(version) AND hour >= \(daysEnd) AND hour < \(to)
                  AND \(sessionFilter: f)
                UNION ALL
                SELECT hour, started, crashed, errored, abnormal FROM session_deltas
                WHERE project_id = \(project) AND version = \(version) AND hour >= \(from) AND hour < \(to)
                  AND \(sessionFilter: f)
            ) r
            GROUP BY t
            """, logger: logger)
        var points: [Date: ReleaseSeriesPoint] = [:]
        for try await (time, n, c, er, ab) in rows.decode((Date, Int64, Int64, Int64, Int64).self) {
            let t = TimeWindow.floor(time, interval.seconds)
            var point = points[t] ?? ReleaseSeriesPoint(t: t, sessions: 0, crashed: 0, errored: 0, abnormal: 0)
            point.sessions += n
            point.crashed += c
            point.errored += er
            point.abnormal += ab
            points[t] = point
        }
        return buckets.map { points[$0] ?? ReleaseSeriesPoint(t: $0, sessions: 0, crashed: 0, errored: 0, abnormal: 0) }
    }
}
