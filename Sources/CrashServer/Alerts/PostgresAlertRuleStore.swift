import Foundation
import Logging
import PostgresNIO

/// ``AlertRuleStore`` on PostgreSQL: the primary's pool (rules are read where they were written).
struct PostgresAlertRuleStore: AlertRuleStore {
    let client: PostgresClient
    let logger: Logger

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    func create(project: Int64, _ rule: AlertRule) async throws -> StoredAlertRule? {
        let rows = try await client.query(
            """
            INSERT INTO alert_rules (project_id, name, trigger, enabled, throttle_minutes, spec, webhook_ids, email_to)
            SELECT \(project), \(rule.name), \(rule.when.type), \(rule.enabled), \(Int32(rule.throttleMinutes)),
                   \(try Self.spec(rule)), \(rule.webhookIDs), \(rule.emailAddresses)
            WHERE (SELECT count(*) FROM alert_rules WHERE project_id = \(project)) < \(AlertRule.maxPerProject)
            RETURNING id, project_id, spec, created_at, updated_at, last_fired_at, last_fired_group, last_fired_release
            """, logger: logger)
        return try await Self.decode(rows).first
    }

    func list(project: Int64) async throws -> [StoredAlertRule] {
        let rows = try await client.query(
            """
            SELECT id, project_id, spec, created_at, updated_at, last_fired_at, last_fired_group, last_fired_release
            FROM alert_rules WHERE project_id = \(project) ORDER BY id
            """, logger: logger)
        return try await Self.decode(rows)
    }

    func rule(project: Int64, id: Int64) async throws -> StoredAlertRule? {
        let rows = try await client.query(
            """
            SELECT id, project_id, spec, created_at, updated_at, last_fired_at, last_fired_group, last_fired_release
            FROM alert_rules WHERE project_id = \(project) AND id = \(id)
            """, logger: logger)
        return try await Self.decode(rows).first
    }

    func update(project: Int64, id: Int64, _ rule: AlertRule) async throws -> StoredAlertRule? {
        let rows = try await client.query(
            """
            UPDATE alert_rules SET name = \(rule.name), trigger = \(rule.when.type), enabled = \(rule.enabled),
                throttle_minutes = \(Int32(rule.throttleMinutes)), spec = \(try Self.spec(rule)),
                webhook_ids = \(rule.webhookIDs), email_to = \(rule.emailAddresses), updated_at = now()
            WHERE project_id = \(project) AND id = \(id)
            RETURNING id, project_id, spec, created_at, updated_at, last_fired_at, last_fired_group, last_fired_release
            """, logger: logger)
        return try await Self.decode(rows).first
    }

    func delete(project: Int64, id: Int64) async throws -> Bool {
        let rows = try await client.query(
            "DELETE FROM alert_rules WHERE project_id = \(project) AND id = \(id) RETURNING id", logger: logger)
        for try await _ in rows.decode(Int64.self) { return true }
        return false
    }

    func webhookIDs(project: Int64) async throws -> Set<Int64> {
        let rows = try await client.query("SELECT id FROM webhooks WHERE project_id = \(project)", logger: logger)
        var out = Set<Int64>()
        for try await id in rows.decode(Int64.self) { out.insert(id) }
        return out
    }

    /// The rule's fields as stored in `spec`.
    static func spec(_ rule: AlertRule) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(JSONValue.object(rule.json)), as: UTF8.self)
    }

    /// A stored `spec` as a rule again. Webhook ids are not checked (they were when stored,
    /// and a webhook a rule names cannot be deleted); e-mail actions are kept.
    static func rule(spec: String) throws -> AlertRule {
        guard let object = try JSONDecoder().decode(JSONValue.self, from: Data(spec.utf8)).object else {
            throw IngestStoreError(description: "an alert rule's spec is not a JSON object")
        }
        var ids = Set<Int64>()
        for case .object(let action) in object["actions"]?.array ?? [] {
            if let id = action["webhook"]?.string.flatMap({ Int64($0) }) { ids.insert(id) }
        }
        return try AlertRule.parse(object: object, context: AlertRule.Context(webhooks: ids, email: true))
    }

    static func decode(_ rows: PostgresRowSequence) async throws -> [StoredAlertRule] {
        var out: [StoredAlertRule] = []
        for try await (id, project, spec, created, updated, firedAt, firedGroup, firedRelease) in rows.decode(
            (Int64, Int64, String, Date, Date, Date?, Int64?, String?).self)
        {
            out.append(
                StoredAlertRule(
                    id: id, project: project, rule: try rule(spec: spec), createdAt: created, updatedAt: updated,
                    lastFiredAt: firedAt, lastFiredGroup: firedGroup == 0 ? nil : firedGroup, lastFiredRelease: firedRelease))
        }
        return out
    }
}
