import CrashWire
import Foundation
import PostgresNIO

/// A release's counts in a window and filters, users included.
struct ReleaseTotals: Sendable, Equatable {
    var version: String
    var sessions: Int64 = 0
    var crashed: Int64 = 0
    var errored: Int64 = 0
    var abnormal: Int64 = 0
    var users: Int64 = 0
    var crashedUsers: Int64 = 0
}

/// The session filters of the release queries.
struct SessionFilters: Sendable, Hashable {
    var environment: String?
    var app: String?
}

/// A release's series point: sessions by `started`, and how they ended.
struct ReleaseSeriesPoint: Codable, Sendable, Equatable {
    var t: Date
    var sessions: Int64
    var crashed: Int64
    var errored: Int64
    var abnormal: Int64
}

extension CrashDatabase {
    /// Each version's totals in `window` (whole hours from `session_hourly`, sub-hour edges from
    /// the sessions and aggregates themselves), only `version` when given. Users are exact
    /// while every row read holds its users (at most 250 each), else estimated from the sketches.
    func releaseTotals(
        project: Int64, window: TimeWindow, filters f: SessionFilters, version: String?, on connection: PostgresConnection
    ) async throws -> [ReleaseTotals] {
        let plan = window.hourPlan
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        let (h0, h1) = plan.hours[0]
        let rows = try await connection.query(
            """
            WITH r AS (
                SELECT version, started, crashed, errored, abnormal, users, users_over, crashed_users, crashed_users_over
                FROM session_hourly
                WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1)
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment))
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(version)::text IS NULL OR version = \(version))
                UNION ALL
                SELECT version, 1, (status = 'crashed')::int, (status = 'errored')::int, (status = 'abnormal')::int,
                       CASE WHEN did_hash IS NULL THEN '{}'::bigint[] ELSE ARRAY[did_hash] END, false,
                       CASE WHEN did_hash IS NULL OR status <> 'crashed' THEN '{}'::bigint[] ELSE ARRAY[did_hash] END, false
                FROM session_states
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment))
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(version)::text IS NULL OR version = \(version))
                UNION ALL
                SELECT version, sessions, crashed, errored, abnormal,
                       CASE WHEN did_hash IS NULL THEN '{}'::bigint[] ELSE ARRAY[did_hash] END, false,
                       CASE WHEN did_hash IS NULL OR crashed = 0 THEN '{}'::bigint[] ELSE ARRAY[did_hash] END, false
                FROM session_aggregates
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment))
                  AND (\(f.app)::text IS NULL OR app_id = \(f.app)) AND (\(version)::text IS NULL OR version = \(version))
            )
            SELECT s.version, s.n, s.c, s.er, s.ab, s.uo, s.co, COALESCE(u.nu, 0)::bigint, COALESCE(u.nc, 0)::bigint
            FROM (
                SELECT version, sum(started)::bigint AS n, sum(crashed)::bigint AS c, sum(errored)::bigint AS er,
                       sum(abnormal)::bigint AS ab, bool_or(users_over) AS uo, bool_or(crashed_users_over) AS co
                FROM r GROUP BY version
            ) s LEFT JOIN (
                SELECT version, count(DISTINCT h) FILTER (WHERE NOT k) AS nu, count(DISTINCT h) FILTER (WHERE k) AS nc
                FROM (SELECT version, false AS k, unnest(users) AS h FROM r
                      UNION ALL SELECT version, true, unnest(crashed_users) FROM r) z
                GROUP BY version
            ) u USING (version)
            WHERE s.n > 0
            """, logger: logger)
        var totals: [ReleaseTotals] = []
        var sketched: Set<String> = []
        for try await (v, n, c, er, ab, usersOver, crashedOver, users, crashedUsers) in rows.decode(
            (String, Int64, Int64, Int64, Int64, Bool, Bool, Int64, Int64).self)
        {
            totals.append(
                ReleaseTotals(
                    version: v, sessions: n, crashed: c, errored: er, abnormal: ab, users: users, crashedUsers: crashedUsers))
            if usersOver || crashedOver { sketched.insert(v) }
        }
        guard !sketched.isEmpty else { return totals }
        let estimates = try await userEstimates(
            project: project, window: window, filters: f, versions: Array(sketched), on: connection)
        for i in totals.indices {
            guard let estimate = estimates[totals[i].version] else { continue }
            totals[i].users = max(totals[i].users, estimate.users)
            totals[i].crashedUsers = max(totals[i].crashedUsers, estimate.crashedUsers)
        }
        return totals
    }

    /// Users and crashed users of `versions` estimated from the sketches of the rows past 250
    /// users merged with the hashes of the others.
    private func userEstimates(
        project: Int64, window: TimeWindow, filters f: SessionFilters, versions: [String], on connection: PostgresConnection
    ) async throws -> [String: (users: Int64, crashedUsers: Int64)] {
        let plan = window.hourPlan
        let (r0, r1) = plan.raw[0], (r2, r3) = plan.raw[1]
        let (h0, h1) = plan.hours[0]
        var sketches: [String: [UserSketch]] = [:]
        func sketch(_ version: String, _ crashed: Bool, _ body: (inout UserSketch) -> Void) {
            var pair = sketches[version] ?? [UserSketch(), UserSketch()]
            body(&pair[crashed ? 1 : 0])
            sketches[version] = pair
        }
        let registers = try await connection.query(
            """
            SELECT version, crashed, register, max(rank) FROM session_user_registers
            WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1) AND version = ANY(\(versions)::text[])
              AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
            GROUP BY 1, 2, 3
            """, logger: logger)
        for try await (version, crashed, register, rank) in registers.decode((String, Bool, Int32, Int32).self) {
            sketch(version, crashed) { $0.merge(index: Int(register), rank: Int(rank)) }
        }
        let hashes = try await connection.query(
            """
            SELECT DISTINCT version, k, h FROM (
                SELECT version, false AS k, unnest(users) AS h FROM session_hourly
                WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1) AND version = ANY(\(versions)::text[]) AND NOT users_over
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
                UNION ALL
                SELECT version, true, unnest(crashed_users) FROM session_hourly
                WHERE project_id = \(project) AND hour >= \(h0) AND hour < \(h1) AND version = ANY(\(versions)::text[])
                  AND NOT crashed_users_over
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
                UNION ALL
                SELECT version, k, did_hash FROM session_states, LATERAL (VALUES (false), (true)) AS x(k)
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND version = ANY(\(versions)::text[]) AND did_hash IS NOT NULL AND (NOT k OR status = 'crashed')
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
                UNION ALL
                SELECT version, k, did_hash FROM session_aggregates, LATERAL (VALUES (false), (true)) AS x(k)
                WHERE project_id = \(project) AND ((started >= \(r0) AND started < \(r1)) OR (started >= \(r2) AND started < \(r3)))
                  AND version = ANY(\(versions)::text[]) AND did_hash IS NOT NULL AND (NOT k OR crashed > 0)
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
            ) z
            """, logger: logger)
        for try await (version, crashed, hash) in hashes.decode((String, Bool, Int64).self) {
            sketch(version, crashed) { $0.insert(hash) }
        }
        return sketches.mapValues { ($0[0].estimate, $0[1].estimate) }
    }

    /// Earliest and latest `started` of each of `versions` over all time, under the filters.
    func releaseSeen(
        project: Int64, filters f: SessionFilters, versions: [String], on connection: PostgresConnection
    ) async throws -> [String: (first: Date, last: Date)] {
        guard !versions.isEmpty else { return [:] }
        // The first and the last hour of each version: two index probes, whatever its age.
        let rows = try await connection.query(
            """
            SELECT v.version, f.first, l.last FROM unnest(\(versions)::text[]) AS v(version)
            CROSS JOIN LATERAL (
                SELECT first_started AS first FROM session_hourly
                WHERE project_id = \(project) AND version = v.version AND first_started IS NOT NULL
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
                ORDER BY hour, first_started LIMIT 1
            ) f
            CROSS JOIN LATERAL (
                SELECT last_started AS last FROM session_hourly
                WHERE project_id = \(project) AND version = v.version AND last_started IS NOT NULL
                  AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
                ORDER BY hour DESC, last_started DESC LIMIT 1
            ) l
            """, logger: logger)
        var seen: [String: (Date, Date)] = [:]
        for try await (version, first, last) in rows.decode((String, Date, Date).self) { seen[version] = (first, last) }
        return seen
    }

    /// Hourly sessions of `version` from `from` (already floored) to `to`, by hour.
    func releaseSeries(
        project: Int64, version: String, from: Date, to: Date, filters f: SessionFilters, on connection: PostgresConnection
    ) async throws -> [Date: ReleaseSeriesPoint] {
        let rows = try await connection.query(
            """
            SELECT hour, sum(started)::bigint, sum(crashed)::bigint, sum(errored)::bigint, sum(abnormal)::bigint
            FROM session_hourly
            WHERE project_id = \(project) AND version = \(version) AND hour >= \(from) AND hour < \(to)
              AND (\(f.environment)::text IS NULL OR environment = \(f.environment)) AND (\(f.app)::text IS NULL OR app_id = \(f.app))
            GROUP BY hour
            """, logger: logger)
        var points: [Date: ReleaseSeriesPoint] = [:]
        for try await (hour, n, c, er, ab) in rows.decode((Date, Int64, Int64, Int64, Int64).self) {
            points[hour] = ReleaseSeriesPoint(t: hour, sessions: n, crashed: c, errored: er, abnormal: ab)
        }
        return points
    }

    /// Groups whose first report ever is of `version` (and `app`), ignored ones left out.
    func groupsIntroduced(
        project: Int64, version: String, app: String?, window: TimeWindow, on connection: PostgresConnection
    ) async throws -> [Int64] {
        let rows = try await connection.query(
            """
            SELECT g.id FROM crash_groups g
            JOIN group_facets fv ON fv.group_id = g.id AND fv.facet = 'version' AND fv.value = \(version)
            WHERE g.project_id = \(project) AND g.status <> 'ignored' AND fv.first_seen = g.first_seen
              AND fv.last_seen >= \(window.from) AND fv.first_seen < \(window.to)
              AND (\(app)::text IS NULL OR EXISTS (
                  SELECT 1 FROM group_facets fa
                  WHERE fa.group_id = g.id AND fa.facet = 'app' AND fa.value = \(app) AND fa.first_seen = g.first_seen))
            """, logger: logger)
        var ids: [Int64] = []
        for try await id in rows.decode(Int64.self) { ids.append(id) }
        return ids
    }
}
