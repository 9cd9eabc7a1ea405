import Foundation
import Logging
import NIOCore
import PostgresNIO

/// ``SessionStore`` on PostgreSQL (docs/release-health.md, "Storage"). Each ``applySessions(project:updates:aggregates:)``
/// is one transaction on the primary under `deadline` (PostgreSQL's lock and statement timeouts
/// are half of it, as for the ingest transaction); reads run in a read snapshot
/// (``CrashDatabase/withReadSnapshot(_:)``), on the standby when there is one.
struct PostgresSessionStore: SessionStore {
    let database: CrashDatabase
    let deadline: Duration
    /// The rollup rows' user sets the release queries have read (one per server: the releases
    /// controller's store, which the dashboard shares).
    let userSets: RollupUserSets

    init(database: CrashDatabase, deadline: Duration = .seconds(10), userSets: RollupUserSets = RollupUserSets()) {
        self.database = database
        self.deadline = deadline
        self.userSets = userSets
    }

    var logger: Logger { database.logger }

    func applySessions(
        project: Int64, updates: [SessionUpdate], aggregates: [SessionAggregate]
    ) async throws
        -> [SessionOutcome]
    {
        let (seconds, attoseconds) = deadline.components
        let statementMilliseconds = max(1, (Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)) / 2)
        guard !updates.isEmpty || !aggregates.isEmpty else { return [] }
        var attempt = 0
        while true {
            do {
                return try await database.client.withTransactionEndingOnClose(logger: logger) { connection in
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
    /// concurrent requests do not deadlock), then the rollup deltas and the raw aggregates.
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

        // What to add to the rollups, by release and hour of `started`: one delta row each.
        var deltas: [SessionRollupKey: SessionRollup] = [:]
        for (state, effect) in counted {
            let key = SessionRollupKey(project: project, release: state.release, time: TimeWindow.floor(state.started, TimeWindow.hour))
            var delta = deltas[key] ?? SessionRollup()
            if effect.started {
                delta.started += 1
                delta.seen(state.started)
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
                project: project, release: aggregate.release, time: TimeWindow.floor(aggregate.started, TimeWindow.hour))
            var delta = deltas[key] ?? SessionRollup()
            delta.started += aggregate.sessions
            delta.crashed += aggregate.crashed
            delta.errored += aggregate.errored
            delta.abnormal += aggregate.abnormal
            delta.seen(aggregate.started)
            if let did = aggregate.did {
                let hash = SessionCounting.userHash(did)
                delta.users.insert(hash)
                if aggregate.crashed > 0 { delta.crashedUsers.insert(hash) }
            }
            deltas[key] = delta
        }
        if !deltas.isEmpty {
            let keys = deltas.keys.sorted()
            let values = keys.map { deltas[$0]! }
            // An insert, not an upsert: concurrent requests of one release never wait for each
            // other here. SessionCompactor folds the rows into session_hours and session_days.
            try await connection.query(
                """
                INSERT INTO session_deltas (project_id, hour, app_id, version, environment, started, crashed, errored, abnormal,
                                            first_started, last_started, users, crashed_users)
                SELECT \(project), hr, a, v, e, s, c, er, ab, CASE WHEN s > 0 THEN f END, CASE WHEN s > 0 THEN l END, u, cu
                FROM unnest(\(keys.map(\.time))::timestamptz[], \(keys.map(\.release.appID))::text[],
                            \(keys.map(\.release.version))::text[], \(keys.map(\.release.environment))::text[],
                            \(values.map(\.started))::bigint[], \(values.map(\.crashed))::bigint[], \(values.map(\.errored))::bigint[],
                            \(values.map(\.abnormal))::bigint[], \(values.map { $0.firstSeen ?? .distantPast })::timestamptz[],
                            \(values.map { $0.lastSeen ?? .distantPast })::timestamptz[], \(values.map(\.users.encoded))::bytea[],
                            \(values.map(\.crashedUsers.encoded))::bytea[])
                     AS u(hr, a, v, e, s, c, er, ab, f, l, u, cu)
                """, logger: logger)
        }
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

    /// Deletes the state of sessions started before `cutoff` (see `crashguard_prune_sessions`).
    func pruneSessions(before cutoff: Date) async throws -> Int64 {
        let rows = try await database.client.query("SELECT crashguard_prune_sessions(\(cutoff))", logger: logger)
        for try await n in rows.decode(Int64.self) { return n }
        return 0
    }
}
