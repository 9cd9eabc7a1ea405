import CrashWire
import Foundation
import Logging
import PostgresNIO

/// Alert rules firing on stored reports (`group.new`, `group.regressed`, `group.reappeared`,
/// `frequency`, `devices`), in the ingest transaction after the batch is applied: a firing
/// commits with the reports that caused it or not at all, and a duplicate, which stores
/// nothing, fires nothing.
///
/// A report of a group merged into another counts towards that group (triage.md, "Merge and
/// unmerge"), so rules judge the merge target: its status, its throttle, its count with every
/// member's reports; such a report never fires `group.new`.
///
/// Cost: one statement per batch that stored reports, an index probe on `alert_rules` for the
/// batch's projects, which answers no rows for a project without enabled ingest rules; then
/// nothing else. With rules: one probe for the batch's merged groups, the filters matched in
/// memory, one count statement per `frequency` or `devices` rule that a report of the batch
/// matches (over `reports`, by group and time), and one statement that takes the throttle and
/// queues the actions.
enum AlertRuleFiring {
    /// A rule that may fire at ingest.
    struct IngestRule {
        var id: Int64
        var project: Int64
        var rule: AlertRule
    }

    /// A rule and group that qualify; `newCount` set for `group.new` (the group is new when its
    /// count is exactly the batch's reports of it). A `crashFreeSessions` firing names the
    /// `release` and group 0; a group's firing has release `""`.
    struct Candidate: Hashable {
        var rule: Int64
        var group: Int64
        var event: String
        var newCount: Int64 = 0
        var release: String = ""
    }

    /// Evaluates the enabled ingest rules of the batch's projects against the batch.
    /// `groupIDs` are the groups the reports' signatures made; `regressed` and `reappeared`
    /// name merge targets already.
    static func fireAtIngest(
        _ stored: [IngestItem], _ groupIDs: [Int64], regressed: Set<Int64>, reappeared: Set<Int64>,
        _ connection: PostgresConnection, logger: Logger
    ) async throws {
        let projects = Array(Set(stored.lazy.map(\.projectID))).sorted()
        let rows = try await connection.query(
            """
            SELECT id, project_id, spec FROM alert_rules
            WHERE project_id = ANY(\(projects)) AND enabled AND trigger = ANY(\(AlertRule.Trigger.ingestTypes))
            """, logger: logger)
        var rules: [IngestRule] = []
        for try await (id, project, spec) in rows.decode((Int64, Int64, String).self) {
            rules.append(IngestRule(id: id, project: project, rule: try PostgresAlertRuleStore.rule(spec: spec)))
        }
        guard !rules.isEmpty else { return }
        let targets = try await mergeTargets(of: groupIDs, connection, logger: logger)
        var batchCounts: [Int64: Int64] = [:]
        for group in groupIDs { batchCounts[group, default: 0] += 1 }
        let now = Date()
        var candidates: [Candidate] = []
        for entry in rules {
            let when = entry.rule.when
            var since = Date.distantPast
            if case .frequency(_, let window) = when { since = now.addingTimeInterval(-Double(window) * 60) }
            if case .devices(_, let window) = when { since = now.addingTimeInterval(-Double(window) * 60) }
            var matched = Set<Int64>()
            for (item, group) in zip(stored, groupIDs)
            where item.projectID == entry.project && item.report.timestamp >= since && entry.rule.filters.matches(item.report) {
                // A merged group's report is its target's, and never makes a new group.
                if let target = targets[group] {
                    if when != .groupNew { matched.insert(target) }
                } else {
                    matched.insert(group)
                }
            }
            guard !matched.isEmpty else { continue }
            switch when {
            case .groupNew: break
            case .groupRegressed: matched.formIntersection(regressed)
            case .groupReappeared: matched.formIntersection(reappeared)
            case .frequency(let count, let window), .devices(let count, let window):
                matched = try await countReached(
                    entry, groups: matched, count: count, windowMinutes: window, devices: when.type == "devices", connection,
                    logger: logger)
            case .spike, .crashFreeSessions: matched = []
            }
            for group in matched.sorted() {
                candidates.append(
                    Candidate(
                        rule: entry.id, group: group, event: when.event, newCount: when == .groupNew ? batchCounts[group] ?? 0 : 0))
            }
        }
        try await fire(candidates, connection, logger: logger)
    }

    /// The groups of the batch merged into another, mapped to that group.
    static func mergeTargets(of groups: [Int64], _ connection: PostgresConnection, logger: Logger) async throws -> [Int64: Int64] {
        let rows = try await connection.query(
            """
            SELECT id, merged_into FROM crash_groups WHERE id = ANY(\(Array(Set(groups)).sorted())) AND merged_into IS NOT NULL
            """, logger: logger)
        var targets: [Int64: Int64] = [:]
        for try await (id, target) in rows.decode((Int64, Int64).self) { targets[id] = target }
        return targets
    }

    /// The groups among `groups` with at least `count` reports (or distinct devices) matching
    /// the rule's filters whose timestamp is within the last `windowMinutes`, each counted with
    /// the groups merged into it.
    static func countReached(
        _ entry: IngestRule, groups: Set<Int64>, count: Int, windowMinutes: Int, devices: Bool,
        _ connection: PostgresConnection, logger: Logger
    ) async throws -> Set<Int64> {
        let f = entry.rule.filters
        let ids = groups.sorted()
        let rows = try await connection.query(
            """
            SELECT o.owner, count(*), count(DISTINCT NULLIF(r.device_id, '')) FROM \(owners: ids) o JOIN (
                SELECT group_id, device_id FROM reports
                WHERE project_id = \(entry.project) AND group_id IN (SELECT member FROM \(owners: ids) m)
                  AND ts >= now() - make_interval(mins => \(Int32(windowMinutes))) AND \(alertFilter: f)
            ) r ON r.group_id = o.member
            GROUP BY o.owner
            """, logger: logger)
        var reached = Set<Int64>()
        for try await (group, reports, distinctDevices) in rows.decode((Int64, Int64, Int64).self) {
            if (devices ? distinctDevices : reports) >= Int64(count) { reached.insert(group) }
        }
        return reached
    }

    /// Fires `candidates`, the one dispatch of every trigger (ingest, spike, crash-free
    /// sessions, a snooze's end): the throttle per rule and group (or version) is a conditional
    /// upsert into `alert_firings` (a firing within the rule's `throttleMinutes` of the previous
    /// one does nothing; `group.new` fires once in a group's life anyway), then one outbox row
    /// per webhook action and per e-mail address, and the rule's `lastFired`, all in one
    /// statement of the caller's transaction. Ignored groups fire only `group.reappeared`,
    /// resolved ones nothing (their `group.regressed` comes as `regressed`). `now` is the
    /// firing's time (nil: the transaction's).
    static func fire(_ candidates: [Candidate], at now: Date? = nil, _ connection: PostgresConnection, logger: Logger) async throws {
        guard !candidates.isEmpty else { return }
        let sorted = candidates.sorted { ($0.rule, $0.group, $0.release) < ($1.rule, $1.group, $1.release) }
        try await connection.query(
            """
            WITH c AS (
                SELECT * FROM unnest(\(sorted.map(\.rule))::bigint[], \(sorted.map(\.group))::bigint[],
                                     \(sorted.map(\.event))::text[], \(sorted.map(\.newCount))::bigint[],
                                     \(sorted.map(\.release))::text[]) AS c(rule_id, group_id, event, n, release)
            ), clock AS (
                SELECT COALESCE(\(now)::timestamptz, now()) AS now
            ), ok AS (
                SELECT c.rule_id, c.group_id, c.release, c.event, r.name, r.throttle_minutes, r.webhook_ids, r.email_to
                FROM c JOIN alert_rules r ON r.id = c.rule_id AND r.enabled
                LEFT JOIN crash_groups g ON g.id = c.group_id
                WHERE c.release <> ''
                   OR ((c.n = 0 OR g.report_count = c.n)
                       AND (g.status IN ('open', 'regressed') OR (g.status = 'ignored' AND g.snooze_until <= now())))
            ), fired AS (
                INSERT INTO alert_firings AS f (rule_id, group_id, release, fired_at)
                SELECT rule_id, group_id, release, clock.now FROM ok CROSS JOIN clock ORDER BY rule_id, group_id, release
                ON CONFLICT (rule_id, group_id, release) DO UPDATE SET fired_at = EXCLUDED.fired_at
                    WHERE f.fired_at <= EXCLUDED.fired_at
                        - make_interval(mins => (SELECT throttle_minutes FROM alert_rules WHERE id = f.rule_id))
                RETURNING rule_id, group_id, release
            ), hooks AS (
                INSERT INTO webhook_deliveries (id, webhook_id, group_id, event, rule_id, rule_name, release)
                SELECT gen_random_uuid(), w.id, NULLIF(ok.group_id, 0), ok.event, ok.rule_id, ok.name, NULLIF(ok.release, '')
                FROM fired JOIN ok USING (rule_id, group_id, release)
                CROSS JOIN LATERAL unnest(ok.webhook_ids) AS a(webhook)
                JOIN webhooks w ON w.id = a.webhook
            ), mails AS (
                INSERT INTO webhook_deliveries (id, group_id, event, rule_id, rule_name, email_to, release)
                SELECT gen_random_uuid(), NULLIF(ok.group_id, 0), ok.event, ok.rule_id, ok.name, a.address, NULLIF(ok.release, '')
                FROM fired JOIN ok USING (rule_id, group_id, release)
                CROSS JOIN LATERAL unnest(ok.email_to) AS a(address)
            )
            UPDATE alert_rules r SET last_fired_at = clock.now, last_fired_group = NULLIF(x.group_id, 0),
                last_fired_release = NULLIF(x.release, '')
            FROM (SELECT DISTINCT ON (rule_id) rule_id, group_id, release FROM fired
                  ORDER BY rule_id, group_id DESC, release DESC) x CROSS JOIN clock
            WHERE r.id = x.rule_id
            """, logger: logger)
    }
}

extension PostgresQuery.StringInterpolation {
    /// An alert rule's report filters over `reports` (``AlertRule/Filters``): each set filter
    /// ANDed; `environment` absent reads as production (the column's default), `fatal` absent
    /// as false, and `context` needs every entry.
    mutating func appendInterpolation(alertFilter f: AlertRule.Filters) {
        let lists: [(String, [String]?)] = [
            ("environment", f.environment), ("app_version", f.version), ("kind", f.kind), ("os", f.os),
        ]
        appendLiteral("(true")
        for (column, values) in lists {
            guard let values else { continue }
            appendLiteral(" AND \(column) = ANY(")
            appendInterpolation(values)
            appendLiteral("::text[])")
        }
        if let fatal = f.fatal {
            appendLiteral(" AND COALESCE(fatal, false) = ")
            appendInterpolation(fatal)
        }
        if let context = f.context {
            let keys = context.keys.sorted()
            appendLiteral(" AND NOT EXISTS (SELECT 1 FROM unnest(")
            appendInterpolation(keys)
            appendLiteral("::text[], ")
            appendInterpolation(keys.map { context[$0]! })
            appendLiteral("::text[]) AS c(k, v) WHERE (COALESCE(context, context_jsonb::text)::jsonb ->> c.k) IS DISTINCT FROM c.v)")
        }
        appendLiteral(")")
    }
}
