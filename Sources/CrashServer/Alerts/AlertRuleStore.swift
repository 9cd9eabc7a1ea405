import CrashWire
import Foundation

/// A stored rule with what the server adds.
struct StoredAlertRule: Sendable {
    var id: Int64
    var project: Int64
    var rule: AlertRule
    var createdAt: Date
    var updatedAt: Date
    var lastFiredAt: Date?
    var lastFiredGroup: Int64?
    var lastFiredRelease: String?

    /// The rule as the routes answer it: its fields as sent plus `id`, `createdAt`,
    /// `updatedAt` and `lastFired`.
    var body: AlertRuleBody {
        var fields = rule.json
        fields["id"] = .string(String(id))
        fields["createdAt"] = .string(RFC3339.format(createdAt))
        fields["updatedAt"] = .string(RFC3339.format(updatedAt))
        if let lastFiredAt {
            var last: [String: JSONValue] = [
                "at": .string(RFC3339.format(lastFiredAt)), "group": lastFiredGroup.map { .string(String($0)) } ?? .null,
            ]
            if let lastFiredRelease { last["release"] = .string(lastFiredRelease) }
            fields["lastFired"] = .object(last)
        } else {
            fields["lastFired"] = .null
        }
        return AlertRuleBody(fields: fields)
    }
}

/// One rule as JSON.
struct AlertRuleBody: Encodable, Sendable {
    var fields: [String: JSONValue]
    func encode(to encoder: any Encoder) throws { try JSONValue.object(fields).encode(to: encoder) }
}

/// `{"rules": [...]}`.
struct AlertRuleListBody: Encodable, Sendable {
    var rules: [AlertRuleBody]
}

/// The alert rules aggregate (table `alert_rules`, the throttle `alert_firings`): the rule
/// routes' storage. Firing at ingest is ``AlertRuleFiring``, in the ingest transaction;
/// ``PostgresAlertRuleStore`` is the implementation.
protocol AlertRuleStore: Sendable {
    /// Stores a rule of `project`; nil when the project has ``AlertRule/maxPerProject`` rules.
    func create(project: Int64, _ rule: AlertRule) async throws -> StoredAlertRule?
    /// The project's rules, oldest first.
    func list(project: Int64) async throws -> [StoredAlertRule]
    /// One rule of `project`, nil when there is none.
    func rule(project: Int64, id: Int64) async throws -> StoredAlertRule?
    /// Replaces a rule's fields; nil when the project has no such rule.
    func update(project: Int64, id: Int64, _ rule: AlertRule) async throws -> StoredAlertRule?
    /// Deletes a rule of `project`; `false` when there is none.
    func delete(project: Int64, id: Int64) async throws -> Bool
    /// The ids of the project's webhooks (what a webhook action may name).
    func webhookIDs(project: Int64) async throws -> Set<Int64>
}
