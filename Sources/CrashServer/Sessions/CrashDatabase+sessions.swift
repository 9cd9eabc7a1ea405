import Foundation
import Logging
import PostgresNIO

/// Where session updates and aggregates are counted (release-health.md): ``CrashDatabase``
/// in the server.
protocol SessionStore: Sendable {
    /// Applies `updates` in array order and adds `aggregates`, all in one transaction that has
    /// committed when this returns; one outcome per update.
    func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate]
    ) async throws
        -> [SessionOutcome]
}

/// ``SessionStore`` on PostgreSQL: each call is one transaction under `deadline` (PostgreSQL's
/// lock and statement timeouts are half of it, as for the ingest transaction).
struct PostgresSessionStore: SessionStore {
    let database: CrashDatabase
    let deadline: Duration

    func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate]
    ) async throws
        -> [SessionOutcome]
    {
        let (seconds, attoseconds) = deadline.components
        let milliseconds = Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
        return try await database.applySessions(
            project: project, updates: updates, aggregates: aggregates, statementMilliseconds: max(1, milliseconds / 2))
    }
}

extension CrashDatabase {
    func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate], statementMilliseconds: Int
    ) async throws -> [SessionOutcome] {
        guard !updates.isEmpty || !aggregates.isEmpty else { return [] }
        var attempt = 0
        while true {
            do {
                return try await client.withTransaction(logger: logger) { connection in
                    // Below the server's deadline, so a lock wait ends in a rollback, never in a
                    // transaction that may still commit after the answer (api-v1.md, "503"). And no
                    // sequential scans: every statement reads rows by key, but once the tables are
                    // analyzed the planner joined the request's few keys against a whole-table scan
                    // (a fivefold cost per update from the second benchmark run on).
                    let limit = "\(statementMilliseconds)ms"
                    try await connection.query(
                        """
                        SELECT set_config('lock_timeout', \(limit), true), set_config('statement_timeout', \(limit), true),
                               set_config('enable_seqscan', 'off', true)
                        """,
                        logger: logger)
                    return try await applySessions(project: project, updates: updates, aggregates: aggregates, connection)
                }
            } catch let error where ["40P01", "40001"].contains(sqlState(error)) && attempt < 5 {
                attempt += 1
            }
        }
    }

    /// One transaction: the sessions (created, or locked and moved, in `sid` order so that
    /// concurrent requests do not deadlock), then the rollups, the user sketches, the releases'
    /// first and last `started`, and the raw aggregates.
    private func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate], _ connection: PostgresConnection
    ) async throws -> [SessionOutcome] {
        var outcomes = [SessionOutcome](repeating: .duplicate, count: updates.count)
        var indices: [UUID: [Int]] = [:]
        for (i, update) in updates.enumerated() { indices[update.sid, default: []].append(i) }
        // In PostgreSQL's order of uuids (their bytes), the order rows are locked in. (Not by
        // `uuidString`: formatting it was a fifth of the server's CPU per update.)
        let sids = indices.keys.sorted(by: Self.uuidPrecedes)

        // Optimistically, every session is new: its row is inserted with the state its updates
        // lead to. A session that exists already (or that a concurrent request inserts first:
        // the insert waits for it) is not inserted, and is locked and moved below instead.
        var fresh: [UUID: (state: SessionState, effects: [SessionCounting.Effect])] = [:]
        for sid in sids {
            var state: SessionState?
            let effects = indices[sid]!.map { SessionCounting.apply(updates[$0], to: &state) }
            fresh[sid] = (state!, effects)
        }
        var inserted: Set<UUID> = []
        if !sids.isEmpty {
            let states = sids.map { fresh[$0]!.state }
            let rows = try await connection.query(
                """
                INSERT INTO session_states (project_id, sid, app_id, version, environment, did_hash, started, status, seq, errors, duration)
                SELECT \(project), s, a, v, e, CASE WHEN hd THEN h END, st, status, seq, er, CASE WHEN d >= 0 THEN d END
                FROM unnest(\(sids)::uuid[], \(states.map(\.release.appID))::text[], \(states.map(\.release.version))::text[],
                            \(states.map(\.release.environment))::text[], \(states.map { $0.didHash != nil })::boolean[],
                            \(states.map { $0.didHash ?? 0 })::bigint[], \(states.map(\.started))::timestamptz[],
                            \(states.map(\.status.rawValue))::text[], \(states.map(\.seq))::bigint[], \(states.map(\.errors))::bigint[],
                            \(states.map { $0.duration ?? -1 })::float8[])
                     AS u(s, a, v, e, hd, h, st, status, seq, er, d)
                ORDER BY s
                ON CONFLICT (project_id, sid) DO NOTHING
                RETURNING sid
                """, logger: logger)
            for try await sid in rows.decode(UUID.self) { inserted.insert(sid) }
        }
        var counted: [(state: SessionState, effect: SessionCounting.Effect)] = []
        for sid in inserted {
            let (state, effects) = fresh[sid]!
            for (i, effect) in zip(indices[sid]!, effects) {
                outcomes[i] = effect.outcome
                counted.append((state, effect))
            }
        }
        let existing = sids.filter { !inserted.contains($0) }
        if !existing.isEmpty {
            // One key probe per session, in sid order. (`sid = ANY(...)` over the table: for a project
            // new since the last ANALYZE, PostgreSQL expected one row for its project_id and read the
            // whole project's sessions, filtering on sid.)
            let rows = try await connection.query(
                """
                SELECT s.ctid::text, s.sid, s.app_id, s.version, s.environment, s.did_hash, s.started, s.status, s.seq, s.errors,
                       s.duration
                FROM unnest(\(existing)::uuid[]) WITH ORDINALITY AS u(sid, n)
                CROSS JOIN LATERAL (
                    SELECT ctid, * FROM session_states WHERE project_id = \(project) AND sid = u.sid LIMIT 1 FOR UPDATE
                ) s
                ORDER BY u.n
                """, logger: logger)
            var changed: [(String, SessionState)] = []
            for try await (tid, sid, app, version, environment, didHash, started, status, seq, errors, duration) in rows.decode(
                (String, UUID, String, String, String, Int64?, Date, String, Int64, Int64, Double?).self)
            {
                var state: SessionState? = SessionState(
                    release: SessionRelease(appID: app, version: version, environment: environment), didHash: didHash,
                    started: started, status: SessionStatus(rawValue: status) ?? .ok, seq: seq, errors: errors, duration: duration)
                let before = state
                for i in indices[sid] ?? [] {
                    let effect = SessionCounting.apply(updates[i], to: &state)
                    outcomes[i] = effect.outcome
                    if effect.final != nil { counted.append((state!, effect)) }
                }
                if state != before { changed.append((tid, state!)) }
            }
            if !changed.isEmpty {
                let states = changed.map(\.1)
                try await connection.query(
                    """
                    UPDATE session_states s SET status = u.status, seq = u.seq, errors = u.errors,
                        duration = CASE WHEN u.d >= 0 THEN u.d END, updated_at = now()
                    FROM unnest(\(changed.map(\.0))::tid[], \(states.map(\.status.rawValue))::text[], \(states.map(\.seq))::bigint[],
                                \(states.map(\.errors))::bigint[], \(states.map { $0.duration ?? -1 })::float8[]) AS u(t, status, seq, errors, d)
                    WHERE s.ctid = u.t AND s.project_id = \(project)
                    """, logger: logger)
            }
        }

        // What to add to the rollups, by release and hour of `started`, in this transaction's shard.
        let shard = Int16.random(in: 0..<SessionRollupKey.shards)
        var deltas: [SessionRollupKey: SessionRollupDelta] = [:]
        for (state, effect) in counted {
            let key = SessionRollupKey(
                release: state.release, hour: TimeWindow.floor(state.started, TimeWindow.hour), shard: shard)
            var delta = deltas[key] ?? SessionRollupDelta()
            if effect.started {
                delta.started += 1
                delta.firstSeen = min(delta.firstSeen ?? state.started, state.started)
                delta.lastSeen = max(delta.lastSeen ?? state.started, state.started)
                if let hash = state.didHash { delta.users.insert(hash) }
            }
            switch effect.final {
            case .crashed?:
                delta.crashed += 1
                if let hash = state.didHash { delta.crashedUsers.insert(hash) }
            case .errored?: delta.errored += 1
            case .abnormal?: delta.abnormal += 1
            default: break
            }
            deltas[key] = delta
        }
        for aggregate in aggregates where aggregate.sessions > 0 {
            let key = SessionRollupKey(
                release: aggregate.release, hour: TimeWindow.floor(aggregate.started, TimeWindow.hour), shard: shard)
            var delta = deltas[key] ?? SessionRollupDelta()
            delta.started += aggregate.sessions
            delta.crashed += aggregate.crashed
            delta.errored += aggregate.errored
            delta.abnormal += aggregate.abnormal
            delta.firstSeen = min(delta.firstSeen ?? aggregate.started, aggregate.started)
            delta.lastSeen = max(delta.lastSeen ?? aggregate.started, aggregate.started)
            if let did = aggregate.did {
                let hash = SessionCounting.userHash(did)
                delta.users.insert(hash)
                if aggregate.crashed > 0 { delta.crashedUsers.insert(hash) }
            }
            deltas[key] = delta
        }
        try await addToRollups(project: project, deltas: deltas, connection)
        let kept = aggregates.filter { $0.sessions > 0 }
        if !kept.isEmpty {
            try await connection.query(
                """
                INSERT INTO session_aggregates (project_id, app_id, version, environment, started, did_hash, sessions, crashed, errored, abnormal)
                SELECT \(project), a, v, e, st, CASE WHEN hd THEN h END, n, c, er, ab
                FROM unnest(\(kept.map(\.release.appID))::text[], \(kept.map(\.release.version))::text[],
                            \(kept.map(\.release.environment))::text[], \(kept.map(\.started))::timestamptz[],
                            \(kept.map { $0.did != nil })::boolean[], \(kept.map { $0.did.map(SessionCounting.userHash) ?? 0 })::bigint[],
                            \(kept.map(\.sessions))::bigint[], \(kept.map(\.crashed))::bigint[], \(kept.map(\.errored))::bigint[],
                            \(kept.map(\.abnormal))::bigint[]) AS u(a, v, e, st, hd, h, n, c, er, ab)
                """, logger: logger)
        }
        return outcomes
    }

    /// `a` before `b` in byte order, as PostgreSQL sorts uuids.
    static func uuidPrecedes(_ a: UUID, _ b: UUID) -> Bool {
        withUnsafeBytes(of: a.uuid) { x in
            withUnsafeBytes(of: b.uuid) { y in memcmp(x.baseAddress!, y.baseAddress!, 16) < 0 }
        }
    }

    /// Adds `deltas` to `session_hourly` (row locks taken in key order by the upsert); rows past
    /// 250 distinct users get their sketch registers.
    private func addToRollups(
        project: Int64, deltas: [SessionRollupKey: SessionRollupDelta], _ connection: PostgresConnection
    ) async throws {
        guard !deltas.isEmpty else { return }
        let keys = deltas.keys.sorted()
        let values = keys.map { deltas[$0]! }
        // Users as (row index, hash, crashed) triples: arrays per row would need a 2-D bind.
        var userRows: [Int32] = [], userHashes: [Int64] = [], userCrashed: [Bool] = []
        for (i, delta) in values.enumerated() {
            for hash in delta.users {
                userRows.append(Int32(i + 1))
                userHashes.append(hash)
                userCrashed.append(false)
            }
            for hash in delta.crashedUsers {
                userRows.append(Int32(i + 1))
                userHashes.append(hash)
                userCrashed.append(true)
            }
        }
        let limit = SessionRollupDelta.exactUsers
        let rows = try await connection.query(
            """
            WITH d AS (
                SELECT * FROM unnest(\(keys.map(\.release.appID))::text[], \(keys.map(\.release.version))::text[],
                                     \(keys.map(\.release.environment))::text[], \(keys.map(\.hour))::timestamptz[],
                                     \(values.map(\.started))::bigint[], \(values.map(\.crashed))::bigint[],
                                     \(values.map(\.errored))::bigint[], \(values.map(\.abnormal))::bigint[],
                                     \(values.map { $0.firstSeen ?? .distantPast })::timestamptz[],
                                     \(values.map { $0.lastSeen ?? .distantPast })::timestamptz[], \(keys.map(\.shard))::int2[])
                    WITH ORDINALITY AS x(a, v, e, hr, s, c, er, ab, f, l, sh, i)
            ), u AS (
                SELECT * FROM unnest(\(userRows)::int[], \(userHashes)::bigint[], \(userCrashed)::boolean[]) AS u(i, h, k)
            )
            INSERT INTO session_hourly AS t (project_id, hour, app_id, version, environment, shard, started, crashed, errored,
                                             abnormal, first_started, last_started, users, crashed_users)
            SELECT \(project), d.hr, d.a, d.v, d.e, d.sh, d.s, d.c, d.er, d.ab, CASE WHEN d.s > 0 THEN d.f END,
                   CASE WHEN d.s > 0 THEN d.l END,
                   ARRAY(SELECT DISTINCT u.h FROM u WHERE u.i = d.i AND NOT u.k ORDER BY u.h),
                   ARRAY(SELECT DISTINCT u.h FROM u WHERE u.i = d.i AND u.k ORDER BY u.h)
            FROM d ORDER BY d.hr, d.a, d.v, d.e, d.sh
            ON CONFLICT (project_id, hour, app_id, version, environment, shard) DO UPDATE SET
                started = t.started + excluded.started, crashed = t.crashed + excluded.crashed,
                errored = t.errored + excluded.errored, abnormal = t.abnormal + excluded.abnormal,
                first_started = LEAST(t.first_started, excluded.first_started),
                last_started = GREATEST(t.last_started, excluded.last_started),
                users = CASE WHEN t.users_over OR cardinality(excluded.users) = 0 THEN t.users
                             ELSE ARRAY(SELECT DISTINCT x FROM unnest(t.users || excluded.users) x ORDER BY x) END,
                crashed_users = CASE WHEN t.crashed_users_over OR cardinality(excluded.crashed_users) = 0 THEN t.crashed_users
                             ELSE ARRAY(SELECT DISTINCT x FROM unnest(t.crashed_users || excluded.crashed_users) x ORDER BY x) END
            RETURNING app_id, version, environment, hour, shard, users_over, crashed_users_over,
                      CASE WHEN NOT users_over AND cardinality(users) > \(limit) THEN users END,
                      CASE WHEN NOT crashed_users_over AND cardinality(crashed_users) > \(limit) THEN crashed_users END
            """, logger: logger)
        // Registers to add: all of a row's users when it passes 250, the new ones of a row past it.
        var registers: [RegisterKey: Int32] = [:]
        var overflowed: [(SessionRollupKey, Bool)] = []
        func add(_ key: SessionRollupKey, crashed: Bool, _ hashes: some Sequence<Int64>) {
            for hash in hashes {
                let (index, rank) = UserSketch.register(of: hash)
                let register = RegisterKey(row: key, crashed: crashed, register: Int32(index))
                registers[register] = max(registers[register] ?? 0, Int32(rank))
            }
        }
        for try await (app, version, environment, hour, shard, usersOver, crashedOver, passed, crashedPassed) in rows.decode(
            (String, String, String, Date, Int16, Bool, Bool, [Int64]?, [Int64]?).self)
        {
            let key = SessionRollupKey(
                release: SessionRelease(appID: app, version: version, environment: environment), hour: hour, shard: shard)
            let delta = deltas[key] ?? SessionRollupDelta()
            if usersOver { add(key, crashed: false, delta.users) }
            if crashedOver { add(key, crashed: true, delta.crashedUsers) }
            if let passed {
                add(key, crashed: false, passed)
                overflowed.append((key, false))
            }
            if let crashedPassed {
                add(key, crashed: true, crashedPassed)
                overflowed.append((key, true))
            }
        }
        if !registers.isEmpty {
            let entries = registers.sorted { $0.key < $1.key }
            try await connection.query(
                """
                INSERT INTO session_user_registers AS r (project_id, hour, app_id, version, environment, shard, crashed, register, rank)
                SELECT \(project), hr, a, v, e, sh, k, g, n
                FROM unnest(\(entries.map(\.key.row.hour))::timestamptz[], \(entries.map(\.key.row.release.appID))::text[],
                            \(entries.map(\.key.row.release.version))::text[], \(entries.map(\.key.row.release.environment))::text[],
                            \(entries.map(\.key.row.shard))::int2[], \(entries.map(\.key.crashed))::boolean[],
                            \(entries.map(\.key.register))::int[], \(entries.map(\.value))::int[])
                     AS u(hr, a, v, e, sh, k, g, n)
                -- Only registers that grow: once a sketch fills, most do not, and an upsert that
                -- changes nothing still locks (writes) the row it conflicts with. A scalar subquery,
                -- one key probe per register: as NOT EXISTS, the planner made it an anti-join over
                -- the whole table.
                WHERE u.n > COALESCE((
                    SELECT r.rank FROM session_user_registers r
                    WHERE r.project_id = \(project) AND r.hour = u.hr AND r.app_id = u.a AND r.version = u.v
                      AND r.environment = u.e AND r.shard = u.sh AND r.crashed = u.k AND r.register = u.g
                    LIMIT 1), 0)
                ON CONFLICT (project_id, hour, app_id, version, environment, shard, crashed, register)
                DO UPDATE SET rank = excluded.rank WHERE r.rank < excluded.rank
                """, logger: logger)
        }
        if !overflowed.isEmpty {
            try await connection.query(
                """
                UPDATE session_hourly t SET users_over = t.users_over OR NOT u.k, crashed_users_over = t.crashed_users_over OR u.k
                FROM unnest(\(overflowed.map(\.0.hour))::timestamptz[], \(overflowed.map(\.0.release.appID))::text[],
                            \(overflowed.map(\.0.release.version))::text[], \(overflowed.map(\.0.release.environment))::text[],
                            \(overflowed.map(\.0.shard))::int2[], \(overflowed.map(\.1))::boolean[]) AS u(hr, a, v, e, sh, k)
                WHERE t.project_id = \(project) AND t.hour = u.hr AND t.app_id = u.a AND t.version = u.v AND t.environment = u.e
                  AND t.shard = u.sh
                """, logger: logger)
        }
    }

    /// Deletes the state of sessions started before `cutoff` (see `crashguard_prune_sessions`).
    func pruneSessions(before cutoff: Date) async throws -> Int64 {
        let rows = try await client.query("SELECT crashguard_prune_sessions(\(cutoff))", logger: logger)
        for try await n in rows.decode(Int64.self) { return n }
        return 0
    }
}

/// A `session_hourly` row's key.
struct SessionRollupKey: Hashable, Comparable, Sendable {
    /// Rows per release and hour: a transaction adds to one of them.
    static let shards: Int16 = 8

    var release: SessionRelease
    var hour: Date
    var shard: Int16

    static func < (a: Self, b: Self) -> Bool {
        (a.hour, a.release.appID, a.release.version, a.release.environment, a.shard)
            < (b.hour, b.release.appID, b.release.version, b.release.environment, b.shard)
    }
}

/// What one transaction adds to a `session_hourly` row.
struct SessionRollupDelta: Sendable {
    /// Distinct users kept exactly per row; past this, a sketch.
    static let exactUsers = 250

    var started: Int64 = 0
    var crashed: Int64 = 0
    var errored: Int64 = 0
    var abnormal: Int64 = 0
    var users: Set<Int64> = []
    var crashedUsers: Set<Int64> = []
    var firstSeen: Date?
    var lastSeen: Date?
}

private struct RegisterKey: Hashable, Comparable {
    var row: SessionRollupKey
    var crashed: Bool
    var register: Int32

    static func < (a: Self, b: Self) -> Bool {
        a.row != b.row ? a.row < b.row : (a.crashed ? 1 : 0, a.register) < (b.crashed ? 1 : 0, b.register)
    }
}
