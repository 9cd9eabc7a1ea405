import CrashWire
import Foundation
import Logging
import PostgresNIO

/// The triage store on the server's primary: changes lock their groups (`FOR UPDATE`, in id
/// order), compare with what is stored and write the changed fields and their activity entries
/// in one transaction.
struct PostgresTriageStore: TriageStore {
    let database: CrashDatabase

    private var logger: Logger { database.logger }

    /// A group's triage fields as stored; `status` reads `open` once a snooze's time has come.
    private struct Current {
        var status: GroupStatus
        var resolvedIn: String?
        var assignee: String?
        var snoozed: Bool
    }

    func apply(_ change: GroupChange, to groups: [Int64], project: Int64, actor: Principal) async throws -> Set<Int64> {
        guard !groups.isEmpty else { return [] }
        let found = try await database.client.withTransactionEndingOnClose(logger: logger) { connection -> Set<Int64> in
            let rows = try await connection.query(
                """
                SELECT id, CASE WHEN snooze_until <= now() THEN 'open' ELSE status END, resolved_in, assignee,
                       snooze_since IS NOT NULL AND NOT COALESCE(snooze_until <= now(), false)
                FROM crash_groups WHERE project_id = \(project) AND id = ANY(\(groups.sorted())) ORDER BY id FOR UPDATE
                """, logger: logger)
            var current: [(Int64, Current)] = []
            for try await (id, status, resolvedIn, assignee, snoozed) in rows.decode((Int64, GroupStatus, String?, String?, Bool?).self) {
                current.append((id, Current(status: status, resolvedIn: resolvedIn, assignee: assignee, snoozed: snoozed == true)))
            }
            var statusChanged: [Int64] = [], assigneeChanged: [Int64] = []
            var entries: (ids: [Int64], types: [String], data: [String]) = ([], [], [])
            func entry(_ id: Int64, _ type: ActivityType, _ data: [String: ActivityValue]) throws {
                entries.ids.append(id)
                entries.types.append(type.rawValue)
                entries.data.append(try Self.json(data))
            }
            for (id, now) in current {
                if let status = change.status, let (type, data) = Self.statusEntry(change, status: status, current: now) {
                    statusChanged.append(id)
                    try entry(id, type, data)
                }
                if let assignee = change.assignee, assignee != now.assignee {
                    assigneeChanged.append(id)
                    if let assignee {
                        try entry(id, .assigned, ["assignee": .string(assignee)])
                    } else {
                        try entry(id, .unassigned, ["assignee": now.assignee.map(ActivityValue.string) ?? .null])
                    }
                }
            }
            if let status = change.status, !statusChanged.isEmpty {
                var until: Date?, count: Int?, devices: Int?
                switch change.snooze {
                case .until(let date): until = date
                case .count(let n): count = n
                case .devices(let n): devices = n
                case nil: break
                }
                try await connection.query(
                    """
                    UPDATE crash_groups SET status = \(status), resolved_in = \(change.resolvedIn),
                        snooze_since = CASE WHEN \(change.snooze != nil) THEN now() END, snooze_until = \(until),
                        snooze_count = \(count), snooze_devices = \(devices), snooze_seen = 0
                    WHERE id = ANY(\(statusChanged))
                    """, logger: logger)
                try await connection.query("DELETE FROM snooze_devices WHERE group_id = ANY(\(statusChanged))", logger: logger)
            }
            if let assignee = change.assignee, !assigneeChanged.isEmpty {
                try await connection.query(
                    "UPDATE crash_groups SET assignee = \(assignee) WHERE id = ANY(\(assigneeChanged))", logger: logger)
            }
            if !entries.ids.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO group_activity (group_id, type, actor, data)
                    SELECT g, t, \(actor.name), d FROM unnest(\(entries.ids)::bigint[], \(entries.types)::text[], \(entries.data)::text[])
                        WITH ORDINALITY AS x(g, t, d, n) ORDER BY n
                    """, logger: logger)
            }
            return Set(current.map(\.0))
        }
        if !found.isEmpty { try await database.noteWrite() }
        return found
    }

    /// The entry a status change writes, or nil when the group already has that status (and
    /// `resolvedIn`; an ignore without a condition of a group ignored forever).
    private static func statusEntry(
        _ change: GroupChange, status: GroupStatus, current: Current
    ) -> (ActivityType, [String: ActivityValue])? {
        switch status {
        case .resolved:
            guard current.status != .resolved || current.resolvedIn != change.resolvedIn else { return nil }
            return (.resolved, ["resolvedIn": change.resolvedIn.map(ActivityValue.string) ?? .null])
        case .ignored:
            if let snooze = change.snooze { return (.snoozed, snooze.data) }
            guard current.status != .ignored || current.snoozed else { return nil }
            return (.ignored, [:])
        case .open, .regressed:
            guard current.status != .open else { return nil }
            return (.reopened, [:])
        }
    }

    func activity(project: Int64, group: Int64, before: Int64?, limit: Int) async throws -> ActivityPage? {
        try await database.withReadSnapshot { connection -> ActivityPage? in
            let created = try await connection.query(
                "SELECT created_at FROM crash_groups WHERE id = \(group) AND project_id = \(project)", logger: logger)
            var createdAt: Date?
            for try await at in created.decode(Date.self) { createdAt = at }
            guard let createdAt else { return nil }
            let rows = try await connection.query(
                """
                SELECT id, at, type, actor, data FROM group_activity
                WHERE group_id = \(group) AND (\(before)::bigint IS NULL OR id < \(before))
                ORDER BY id DESC LIMIT \(limit)
                """, logger: logger)
            var entries: [ActivityEntry] = []
            for try await (id, at, type, actor, data) in rows.decode((Int64, Date, String, String, String).self) {
                entries.append(try Self.entry(id: id, at: at, type: type, actor: actor, data: data))
            }
            return ActivityPage(entries: entries, created: createdAt)
        }
    }

    func comment(project: Int64, group: Int64, text: String, actor: Principal) async throws -> ActivityEntry? {
        let data = try Self.json(["text": .string(text)])
        let rows = try await database.client.query(
            """
            INSERT INTO group_activity (group_id, type, actor, data)
            SELECT id, 'comment', \(actor.name), \(data) FROM crash_groups WHERE id = \(group) AND project_id = \(project)
            RETURNING id, at
            """, logger: logger)
        for try await (id, at) in rows.decode((Int64, Date).self) {
            try await database.noteWrite()
            return ActivityEntry(id: String(id), at: at, type: .comment, actor: actor.name, data: ["text": .string(text)])
        }
        return nil
    }

    func wakeDueSnoozes(limit: Int) async throws -> [Int64] {
        try await database.client.withTransactionEndingOnClose(logger: logger) { connection in
            let rows = try await connection.query(
                """
                SELECT id FROM crash_groups WHERE snooze_until <= now() AND status = 'ignored' ORDER BY id LIMIT \(limit)
                """, logger: logger)
            var due: [Int64] = []
            for try await id in rows.decode(Int64.self) { due.append(id) }
            let opened = try await Self.reappear(due, connection, logger: logger)
            // The snooze's time ran out: its `group.reappeared` rules fire in this transaction.
            try await AlertRuleFiring.fireReappeared(opened, connection, logger: logger)
            return opened
        }
    }

    /// Reopens those of `groups` whose snooze condition is met (its time has come, or its new
    /// reports or devices reached the count), writing a `reappeared` entry with the condition
    /// and queueing `group.reappeared` for the subscribed webhooks, in the caller's transaction:
    /// the snooze-time check (``wakeDueSnoozes(limit:)``) and the ingest transaction that counts
    /// the report meeting a count (``PostgresIngestStore``) share it. Returns the reopened groups.
    static func reappear(_ groups: [Int64], _ connection: PostgresConnection, logger: Logger) async throws -> [Int64] {
        guard !groups.isEmpty else { return [] }
        let rows = try await connection.query(
            """
            WITH due AS (
                SELECT id, project_id FROM crash_groups
                WHERE id = ANY(\(groups.sorted())) AND status = 'ignored'
                  AND (snooze_until <= now() OR snooze_seen >= COALESCE(snooze_count, snooze_devices))
                ORDER BY id FOR UPDATE SKIP LOCKED
            ), opened AS (
                UPDATE crash_groups c SET status = 'open', snooze_since = NULL, snooze_until = NULL, snooze_count = NULL,
                    snooze_devices = NULL, snooze_seen = 0
                FROM due WHERE c.id = due.id RETURNING c.id
            ), activity AS (
                INSERT INTO group_activity (group_id, type, actor, data)
                SELECT due.id, 'reappeared', 'system',
                       COALESCE((SELECT a.data FROM group_activity a WHERE a.group_id = due.id AND a.type = 'snoozed'
                                 ORDER BY a.id DESC LIMIT 1), '{}')
                FROM due ORDER BY due.id
            ), devices AS (
                DELETE FROM snooze_devices WHERE group_id IN (SELECT id FROM due)
            ), hooks AS (
                INSERT INTO webhook_deliveries (id, webhook_id, group_id, event)
                SELECT gen_random_uuid(), w.id, due.id, 'group.reappeared'
                FROM due JOIN webhooks w ON w.project_id = due.project_id AND 'group.reappeared' = ANY(w.events)
                ORDER BY w.id, due.id
            )
            SELECT id FROM opened
            """, logger: logger)
        var opened: [Int64] = []
        for try await id in rows.decode(Int64.self) { opened.append(id) }
        return opened.sorted()
    }

    /// An activity row as its entry.
    private static func entry(id: Int64, at: Date, type: String, actor: String, data: String) throws -> ActivityEntry {
        ActivityEntry(
            id: String(id), at: at, type: ActivityType(rawValue: type) ?? .comment, actor: actor,
            data: try JSONDecoder().decode([String: ActivityValue].self, from: Data(data.utf8)))
    }

    /// An entry's `data` as the JSON text stored.
    private static func json(_ data: [String: ActivityValue]) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(data), as: UTF8.self)
    }
}

extension PostgresQueryStore.Reader {
    /// The snoozes among `ids` (ignored groups with a condition whose time has not come).
    func snoozes(ids: [Int64]) async throws -> [Int64: SnoozeBody] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT id, snooze_since, snooze_until, snooze_count, snooze_devices, snooze_seen FROM crash_groups
            WHERE id = ANY(\(ids)) AND status = 'ignored' AND snooze_since IS NOT NULL AND NOT COALESCE(snooze_until <= now(), false)
            """, logger: logger)
        var out: [Int64: SnoozeBody] = [:]
        for try await (id, since, until, count, devices, seen) in rows.decode((Int64, Date, Date?, Int32?, Int32?, Int64).self) {
            out[id] = SnoozeBody(
                since: since, until: until, untilCount: count.map(Int.init), count: count == nil ? nil : seen,
                untilDevices: devices.map(Int.init), devices: devices == nil ? nil : seen)
        }
        return out
    }
}
