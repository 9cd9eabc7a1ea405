import Foundation
import Logging
import PostgresNIO

/// The triggers no report fires: `spike` (with spike detection), `crashFreeSessions` (the
/// ``AlertEvaluator``'s check) and `group.reappeared` when a snooze's time runs out
/// (``PostgresTriageStore/wakeDueSnoozes(limit:)``). Each builds candidates and hands them to
/// ``AlertRuleFiring/fire(_:at:_:logger:)``, the dispatch the ingest triggers use, so the
/// throttle, `lastFired` and the outbox rows are written one way.
extension AlertRuleFiring {
    /// The enabled rules with trigger `type` of `projects` (every project when nil).
    static func enabledRules(
        type: String, projects: [Int64]?, _ connection: PostgresConnection, logger: Logger
    ) async throws -> [IngestRule] {
        let rows = try await connection.query(
            """
            SELECT id, project_id, spec FROM alert_rules
            WHERE enabled AND trigger = \(type) AND (\(projects)::bigint[] IS NULL OR project_id = ANY(\(projects)::bigint[]))
            ORDER BY id
            """, logger: logger)
        var rules: [IngestRule] = []
        for try await (id, project, spec) in rows.decode((Int64, Int64, String).self) {
            rules.append(IngestRule(id: id, project: project, rule: try PostgresAlertRuleStore.rule(spec: spec)))
        }
        return rules
    }

    /// Fires the `spike` rules of the spiking `groups` at `now`, each for the group it is
    /// merged into when it is merged: a rule's `kind` filter matches that group's kind, its
    /// `fatal` filter whether it or a group merged into it has any fatal report.
    static func fireSpikes(_ groups: [Int64], at now: Date, _ connection: PostgresConnection, logger: Logger) async throws {
        guard !groups.isEmpty else { return }
        let rows = try await connection.query(
            """
            SELECT DISTINCT t.id, t.project_id, t.kind,
                   t.fatal OR EXISTS (SELECT 1 FROM crash_groups m WHERE m.merged_into = t.id AND m.fatal)
            FROM crash_groups g JOIN crash_groups t ON t.id = COALESCE(g.merged_into, g.id)
            WHERE g.id = ANY(\(groups.sorted()))
            """, logger: logger)
        var spiking: [(id: Int64, project: Int64, kind: String, fatal: Bool)] = []
        for try await row in rows.decode((Int64, Int64, String, Bool).self) { spiking.append(row) }
        let rules = try await enabledRules(
            type: "spike", projects: Array(Set(spiking.map(\.project))).sorted(), connection, logger: logger)
        var candidates: [Candidate] = []
        for entry in rules {
            for group in spiking where group.project == entry.project {
                if let kinds = entry.rule.filters.kind, !kinds.contains(group.kind) { continue }
                if let fatal = entry.rule.filters.fatal, fatal != group.fatal { continue }
                candidates.append(Candidate(rule: entry.id, group: group.id, event: entry.rule.when.event))
            }
        }
        try await fire(candidates, at: now, connection, logger: logger)
    }

    /// Fires the `group.reappeared` rules of `groups`, which a snooze's end (its time) has just
    /// reopened in the caller's transaction. No report caused it, so a rule's filters are
    /// matched against the group's latest stored report.
    static func fireReappeared(_ groups: [Int64], _ connection: PostgresConnection, logger: Logger) async throws {
        guard !groups.isEmpty else { return }
        let rows = try await connection.query(
            "SELECT id, project_id FROM crash_groups WHERE id = ANY(\(groups.sorted()))", logger: logger)
        var projectOf: [Int64: Int64] = [:]
        for try await (id, project) in rows.decode((Int64, Int64).self) { projectOf[id] = project }
        let rules = try await enabledRules(
            type: "group.reappeared", projects: Array(Set(projectOf.values)).sorted(), connection, logger: logger)
        var candidates: [Candidate] = []
        for entry in rules {
            var matched = projectOf.filter { $0.value == entry.project }.map(\.key).sorted()
            if entry.rule.filters != AlertRule.Filters(), !matched.isEmpty {
                matched = try await latestReportMatches(matched, entry.rule.filters, connection, logger: logger)
            }
            candidates += matched.map { Candidate(rule: entry.id, group: $0, event: entry.rule.when.event) }
        }
        try await fire(candidates, connection, logger: logger)
    }

    /// Those of `groups` whose latest stored report (of the group or a group merged into it)
    /// passes `filters`.
    private static func latestReportMatches(
        _ groups: [Int64], _ filters: AlertRule.Filters, _ connection: PostgresConnection, logger: Logger
    ) async throws -> [Int64] {
        let rows = try await connection.query(
            """
            SELECT g.id FROM unnest(\(groups)::bigint[]) AS g(id)
            CROSS JOIN LATERAL (
                SELECT * FROM reports r
                WHERE r.group_id IN (SELECT g.id UNION ALL SELECT m.id FROM crash_groups m WHERE m.merged_into = g.id)
                ORDER BY r.ts DESC LIMIT 1
            ) AS latest
            WHERE \(alertFilter: filters)
            """, logger: logger)
        var out: [Int64] = []
        for try await id in rows.decode(Int64.self) { out.append(id) }
        return out
    }

    /// A version's sessions and crashed sessions started in the `crashFreeSessions` rule's
    /// window before `now`, in the rule's environments (all when it names none): what the
    /// check compares and what a firing's webhook body and message show.
    struct ReleaseHealth: Sendable, Equatable {
        var version: String
        var sessions: Int64
        var crashed: Int64
        /// `1 - crashed / sessions`.
        var crashFreeSessions: Double { sessions == 0 ? 1 : 1 - Double(crashed) / Double(sessions) }
    }

    /// Each version's ``ReleaseHealth`` for the `crashFreeSessions` rule `rule` of `project` at
    /// `now` (the versions with sessions; only `release` when the rule names one), read from the
    /// release-health rollups as the releases list reads them.
    static func releaseHealth(
        project: Int64, rule: AlertRule, now: Date, sessions: PostgresSessionStore, _ connection: PostgresConnection
    ) async throws -> [ReleaseHealth] {
        guard case .crashFreeSessions(_, let release, _, let windowMinutes) = rule.when else { return [] }
        let window = TimeWindow(from: now.addingTimeInterval(-Double(windowMinutes) * 60), to: now)
        let plan = SessionReadPlan(window, weeks: try await sessions.weeksReady(on: connection))
        var byVersion: [String: ReleaseHealth] = [:]
        for environment in rule.filters.environment.map({ $0.map(Optional.some) }) ?? [nil] {
            let filters = SessionFilters(environment: environment, app: nil)
            for totals in try await sessions.releaseCounts(project: project, plan: plan, filters: filters, on: connection)
            where release == nil || totals.version == release {
                byVersion[totals.version, default: ReleaseHealth(version: totals.version, sessions: 0, crashed: 0)].sessions +=
                    totals.sessions
                byVersion[totals.version]!.crashed += totals.crashed
            }
        }
        return byVersion.values.sorted { $0.version < $1.version }
    }

    /// The `crashFreeSessions` check at `now`: every enabled such rule fires for each version
    /// with at least `minSessions` sessions in its window whose crash-free rate is below
    /// `below`, throttled per rule and version. One transaction; servers checking at once fire
    /// each version once (the throttle's conditional upsert). Returns the firings it queued
    /// as (rule, version) pairs, the throttled ones included.
    @discardableResult
    static func checkCrashFreeSessions(at now: Date, database: CrashDatabase, logger: Logger) async throws -> [Candidate] {
        let sessions = PostgresSessionStore(database: database)
        return try await database.client.withTransactionEndingOnClose(logger: logger) { connection in
            let rules = try await enabledRules(type: "crashFreeSessions", projects: nil, connection, logger: logger)
            var candidates: [Candidate] = []
            for entry in rules {
                guard case .crashFreeSessions(let below, _, let minSessions, _) = entry.rule.when else { continue }
                for health in try await releaseHealth(
                    project: entry.project, rule: entry.rule, now: now, sessions: sessions, connection)
                where health.sessions >= Int64(minSessions) && health.crashFreeSessions < below {
                    candidates.append(Candidate(rule: entry.id, group: 0, event: entry.rule.when.event, release: health.version))
                }
            }
            try await fire(candidates, at: now, connection, logger: logger)
            return candidates
        }
    }

    /// A release firing's body as it is at `now`: the version's counts over the window of the
    /// rule stored as `ruleSpec` (the default 24 hours and every environment when the rule is
    /// gone), and the rule's threshold. Nil for a version without a session in the window:
    /// shared by the webhook body and the message.
    static func releaseBody(
        project: Int64, projectSlug: String, version: String, ruleSpec: String?, now: Date, database: CrashDatabase,
        publicURL: String
    ) async throws -> (body: WebhookPayload.ReleaseBody, below: Double?)? {
        var rule = try ruleSpec.map { try PostgresAlertRuleStore.rule(spec: $0) }
        var below: Double?
        if case .crashFreeSessions(let threshold, _, let minSessions, let window) = rule?.when {
            below = threshold
            rule?.when = .crashFreeSessions(below: threshold, release: version, minSessions: minSessions, windowMinutes: window)
        } else {
            rule = nil
        }
        let effective =
            rule
            ?? AlertRule(
                name: "", when: .crashFreeSessions(below: 1, release: version, minSessions: 1, windowMinutes: 1440),
                filters: AlertRule.Filters(), actions: [], throttleMinutes: AlertRule.defaultThrottleMinutes, enabled: true,
                json: [:])
        guard case .crashFreeSessions(_, _, _, let windowMinutes) = effective.when else { return nil }
        let sessions = PostgresSessionStore(database: database)
        let health = try await database.client.withConnection { connection in
            try await releaseHealth(project: project, rule: effective, now: now, sessions: sessions, connection)
        }
        guard let mine = health.first(where: { $0.version == version }) else { return nil }
        let body = WebhookPayload.ReleaseBody(
            version: version, crashFreeSessions: mine.crashFreeSessions, sessions: mine.sessions, crashedSessions: mine.crashed,
            windowMinutes: windowMinutes,
            url: WebhookPayload.releaseURL(publicURL: publicURL, project: projectSlug, version: version))
        return (body, below)
    }
}
