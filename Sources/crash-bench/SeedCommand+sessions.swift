import Foundation
import PostgresNIO

/// `crash-bench seed --sessions N`: release-health sessions for the release queries, set-based.
///
/// The sessions are generated in an unlogged staging table, then each session table gets the
/// rows ingest (PostgresSessionStore.swift) would have written for them, one sent session per
/// transaction: `session_states` (one row per session sent as updates), `session_aggregates`
/// (the sessions sent as Sentry aggregates, one row per entry) and `session_deltas` (one per hour
/// of `started` and release, with its counts, first and last `started` and all its user hashes),
/// which the server's SessionCompactor folds into `session_hours` and `session_days`.
///
/// Shape: `days` days up to now; 40 versions, 10 released before the window and one a day in
/// it, a session's version the newest released one or an older one with a Zipf-like share
/// (offset k about k^-1.2); `users` distinct users (first 64 bits of SHA-256 of `user-<n>`, as
/// ingest hashes a `did`), heavy users more often, each on one app (70 % `com.example.demo`,
/// 30 % `com.example.demo.widget`) and environment (92 % production, 4 % staging, 4 %
/// development); 2 % anonymous. 2.5 % crashed, 2 % errored, 0.5 % abnormal, the rest exited;
/// half of the sessions of the last 30 minutes that would exit still open; 2 % sent as aggregates.
extension SeedCommand {
    static let sessionVersions: [String] =
        versions + (0..<20).map { i in "1.\(19 - i).0" }

    static func seedSessions(
        _ c: PostgresConnection, projectID: Int64, sessions: Int, users: Int, days: Int
    ) async throws {
        let logger = Bench.quietLogger
        let clock = ContinuousClock()
        func step(_ name: String, _ sql: String) async throws {
            let t0 = clock.now
            var binds = PostgresBindings()
            if sql.contains("$1") { binds.append(projectID) }
            try await c.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
            print("seed: sessions: \(name) in " + String(format: "%.0f s", Bench.seconds(clock.now - t0)))
        }
        let versions = "ARRAY['" + sessionVersions.joined(separator: "','") + "']"
        let span = Double(days) * 86_400
        try await c.query("DROP TABLE IF EXISTS seed_users, seed_sessions", logger: logger)
        try await step(
            "\(users) users",
            """
            CREATE UNLOGGED TABLE seed_users AS
            SELECT n AS u, CASE WHEN n % 10 < 7 THEN 'com.example.demo' ELSE 'com.example.demo.widget' END AS app,
                   CASE WHEN n % 25 = 0 THEN 'staging' WHEN n % 25 = 1 THEN 'development' ELSE 'production' END AS env,
                   ('x' || encode(substring(sha256(convert_to('user-' || n, 'UTF8')) FROM 1 FOR 8), 'hex'))::bit(64)::bigint AS h
            FROM generate_series(1, \(users)) AS n
            """)
        try await c.query("ALTER TABLE seed_users ADD PRIMARY KEY (u)", logger: logger)
        try await c.query(
            """
            CREATE UNLOGGED TABLE seed_sessions (
                sid uuid, app text, version text, env text, did_hash bigint, started timestamptz, status text,
                errors bigint, duration float8, shard int2, agg boolean)
            """, logger: logger)
        let chunk = 1_000_000
        var done = 0
        while done < sessions {
            let n = min(chunk, sessions - done)
            // A session at d days into the window: the newest version then is index 30 - floor(d)
            // (1-based, newest first), its own the newest + a Zipf-like offset.
            try await step(
                "sessions \(done + 1)-\(done + n)",
                """
                INSERT INTO seed_sessions
                SELECT gen_random_uuid(), u.app, (\(versions))[least(\(sessionVersions.count), 30 - least(29, floor(s.d)::int) + s.k)],
                       u.env, CASE WHEN s.anon THEN NULL ELSE u.h END,
                       CASE WHEN s.agg THEN date_trunc('minute', s.t) ELSE s.t END, x.status,
                       CASE WHEN x.status = 'errored' THEN 1 + floor(random() * 3)::bigint ELSE 0 END,
                       CASE WHEN x.status = 'ok' THEN NULL ELSE round((random() * 900)::numeric, 3)::float8 END,
                       floor(random() * 8)::int2, s.agg
                FROM (
                    SELECT now() - make_interval(secs => \(span) * r) AS t, \(Double(days)) * (1 - r) AS d,
                           least(1000, floor(power(1 - random(), -0.8333::float8)))::int - 1 AS k, random() AS q,
                           random() < 0.5 AS o, random() < 0.02 AS anon,
                           1 + floor(\(users) * power(random(), 2))::int AS uid, random() < 0.02 AS agg, r
                    FROM (SELECT random() AS r FROM generate_series(1, \(n))) g
                ) s
                JOIN seed_users u ON u.u = least(s.uid, \(users))
                CROSS JOIN LATERAL (
                    SELECT CASE WHEN s.q < 0.025 THEN 'crashed' WHEN s.q < 0.045 THEN 'errored' WHEN s.q < 0.05 THEN 'abnormal'
                                WHEN s.o AND NOT s.agg AND s.t > now() - interval '30 minutes' THEN 'ok'
                                ELSE 'exited' END AS status
                ) x
                """)
            done += n
        }
        // In order of `started`, as ingest inserts them (a session's row is written by its
        // first update, its end is a HOT update on the same page): a window's sub-hour edge
        // then reads the few pages of that hour, not one page per session.
        try await step(
            "session_states",
            """
            INSERT INTO session_states (project_id, sid, app_id, version, environment, did_hash, started, status, seq, errors,
                                        duration, updated_at)
            SELECT $1, sid, app, version, env, did_hash, started, status, CASE WHEN status = 'ok' THEN 0 ELSE 1 END, errors,
                   duration, started + make_interval(secs => COALESCE(duration, 0))
            FROM seed_sessions WHERE NOT agg ORDER BY started
            """)
        try await step(
            "session_aggregates",
            """
            INSERT INTO session_aggregates (project_id, app_id, version, environment, started, did_hash, sessions, crashed, errored,
                                            abnormal, received_at)
            SELECT $1, app, version, env, started, did_hash, count(*), count(*) FILTER (WHERE status = 'crashed'),
                   count(*) FILTER (WHERE status = 'errored'), count(*) FILTER (WHERE status = 'abnormal'), started + interval '1 minute'
            FROM seed_sessions WHERE agg GROUP BY app, version, env, started, did_hash ORDER BY started
            """)
        // One delta per hour and release with all of its users, as if one transaction had
        // counted them; the server folds them into session_hours and session_days
        // (SessionCompactor) once it runs.
        try await step(
            "session_deltas",
            """
            INSERT INTO session_deltas (project_id, hour, app_id, version, environment, started, crashed, errored, abnormal,
                                        first_started, last_started, users, crashed_users)
            SELECT $1, date_trunc('hour', started, 'UTC'), app, version, env, count(*), count(*) FILTER (WHERE status = 'crashed'),
                   count(*) FILTER (WHERE status = 'errored'), count(*) FILTER (WHERE status = 'abnormal'), min(started), max(started),
                   '\\x00'::bytea || COALESCE((SELECT string_agg(int8send(h), ''::bytea)
                                              FROM unnest(array_agg(DISTINCT did_hash) FILTER (WHERE did_hash IS NOT NULL)) h), ''::bytea),
                   '\\x00'::bytea || COALESCE((SELECT string_agg(int8send(h), ''::bytea)
                                              FROM unnest(array_agg(DISTINCT did_hash)
                                                          FILTER (WHERE did_hash IS NOT NULL AND status = 'crashed')) h), ''::bytea)
            FROM seed_sessions GROUP BY 2, 3, 4, 5
            ORDER BY 2, 3, 4, 5
            """)
        try await c.query("DROP TABLE IF EXISTS seed_users, seed_sessions", logger: logger)
        for table in ["session_states", "session_aggregates", "session_deltas"] {
            try await c.query(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: logger)
        }
        let shape = try await Bench.values(
            c,
            """
            SELECT format('%s deltas, %s states, %s aggregates, %s sessions, %s crashed',
                          (SELECT count(*) FROM session_deltas WHERE project_id = \(projectID)),
                          (SELECT count(*) FROM session_states WHERE project_id = \(projectID)),
                          (SELECT count(*) FROM session_aggregates WHERE project_id = \(projectID)),
                          (SELECT sum(started) FROM session_deltas WHERE project_id = \(projectID)),
                          (SELECT sum(crashed) FROM session_deltas WHERE project_id = \(projectID)))
            """, as: String.self)
        print("seed: sessions: " + (shape.first ?? ""))
    }
}
