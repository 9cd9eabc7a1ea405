import CrashWire
import Foundation

/// An alert rule of a project (contract "Alert rules and email"): one trigger, optional
/// filters ANDed, one to ten actions, a throttle per group and an on/off switch.
///
/// ``json`` keeps the rule's fields as they were sent (defaults filled in): the answers give
/// them back that way, and a `PATCH` merges into them and is checked as a whole rule again.
struct AlertRule: Sendable, Equatable {
    /// What makes a rule fire.
    enum Trigger: Sendable, Equatable {
        case groupNew, groupRegressed, groupReappeared
        /// At least `count` matching reports of the group with a timestamp in the last `windowMinutes`.
        case frequency(count: Int, windowMinutes: Int)
        /// At least `count` distinct `device.id` among those reports.
        case devices(count: Int, windowMinutes: Int)
        /// The group spikes as `group.spike` does (``PostgresWebhookStore/detectSpikes(now:)``).
        case spike
        /// A version's crash-free session rate is below `below`, with at least `minSessions`
        /// sessions started in the last `windowMinutes`.
        case crashFreeSessions(below: Double, release: String?, minSessions: Int, windowMinutes: Int)

        /// The `when.type` name.
        var type: String {
            switch self {
            case .groupNew: "group.new"
            case .groupRegressed: "group.regressed"
            case .groupReappeared: "group.reappeared"
            case .frequency: "frequency"
            case .devices: "devices"
            case .spike: "spike"
            case .crashFreeSessions: "crashFreeSessions"
            }
        }

        /// The event name of a firing: `X-CrashGuard-Event` and the body's `event`.
        var event: String {
            switch self {
            case .groupNew, .groupRegressed, .groupReappeared: type
            case .frequency: "group.frequency"
            case .devices: "group.devices"
            case .spike: "group.spike"
            case .crashFreeSessions: "release.crashFreeSessions"
            }
        }

        /// Evaluated in the ingest transaction (the others by the periodic check).
        var atIngest: Bool {
            switch self {
            case .spike, .crashFreeSessions: false
            default: true
            }
        }

        static let ingestTypes = ["group.new", "group.regressed", "group.reappeared", "frequency", "devices"]
    }

    /// The filters; nil matches everything. Lists match when the report's value is one of them.
    struct Filters: Sendable, Equatable {
        var environment: [String]?
        var version: [String]?
        var kind: [String]?
        var fatal: Bool?
        var os: [String]?
        var context: [String: String]?

        /// Whether `report` passes every filter (absent environment reads as `production`,
        /// absent fatal as false, a missing OS matches no `os` filter).
        func matches(_ report: Report) -> Bool {
            if let environment, !environment.contains(report.environment ?? ReportLimits.defaultEnvironment) { return false }
            if let version, !version.contains(report.app.version) { return false }
            if let kind, !kind.contains(report.kind.rawValue) { return false }
            if let fatal, (report.fatal ?? false) != fatal { return false }
            if let os, !os.contains(report.device?.os ?? "\u{0}") { return false }
            if let context {
                let reported = report.context ?? [:]
                for (key, value) in context where reported[key] != value { return false }
            }
            return true
        }
    }

    /// What a firing does.
    enum Action: Sendable, Equatable {
        case webhook(Int64)
        case email([String])
    }

    static let maxPerProject = 100
    static let defaultThrottleMinutes = 30

    var name: String
    var when: Trigger
    var filters: Filters
    var actions: [Action]
    var throttleMinutes: Int
    var enabled: Bool
    /// The fields as sent, defaults filled in: `name`, `when`, `filters`, `actions`,
    /// `throttleMinutes`, `enabled`.
    var json: [String: JSONValue]

    /// The webhooks the actions name.
    var webhookIDs: [Int64] {
        actions.compactMap { if case .webhook(let id) = $0 { id } else { nil } }
    }

    /// The addresses of the e-mail actions, each once.
    var emailAddresses: [String] {
        var seen = Set<String>()
        var out: [String] = []
        for case .email(let to) in actions { for address in to where seen.insert(address).inserted { out.append(address) } }
        return out
    }
}

// MARK: - Parsing

extension AlertRule {
    /// What a rule's webhook and e-mail actions are checked against.
    struct Context: Sendable {
        /// The ids of the project's webhooks.
        var webhooks: Set<Int64>
        /// Whether the server sends e-mail (`CRASHGUARD_SMTP_URL`).
        var email: Bool
    }

    /// Parses a `POST` body; every error is a 400 whose message starts with the field's path.
    static func parse(_ bytes: [UInt8], context: Context) throws -> AlertRule {
        try parse(object: try object(bytes), context: context)
    }

    /// A `PATCH` body merged into `stored` (fields not sent are kept), checked as a whole rule.
    static func patch(_ stored: AlertRule, with bytes: [UInt8], context: Context) throws -> AlertRule {
        var merged = stored.json
        for (key, value) in try object(bytes) { merged[key] = value }
        return try parse(object: merged, context: context)
    }

    private static func object(_ bytes: [UInt8]) throws -> [String: JSONValue] {
        guard let object = (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)))?.object else {
            throw APIError.badRequest(#"body: must be a JSON object like {"name": ..., "when": {"type": "group.new"}, "actions": [...]}"#)
        }
        return object
    }

    static let fields: Set<String> = ["name", "when", "filters", "actions", "throttleMinutes", "enabled"]

    static func parse(object: [String: JSONValue], context: Context) throws -> AlertRule {
        for key in object.keys.sorted() where !fields.contains(key) {
            throw APIError.badRequest("\(key): unknown field; a rule has \(fields.sorted().joined(separator: ", "))")
        }
        guard let name = object["name"]?.string else { throw APIError.badRequest("name: required, a string") }
        guard (1...200).contains(name.utf8.count) else { throw APIError.badRequest("name: 1 to 200 bytes") }
        guard let whenObject = object["when"]?.object else {
            throw APIError.badRequest(#"when: required, an object like {"type": "group.new"}"#)
        }
        let when = try trigger(whenObject)
        var filtersObject: [String: JSONValue] = [:]
        if let value = object["filters"], value != .null {
            guard let given = value.object else { throw APIError.badRequest("filters: must be an object") }
            filtersObject = given
        }
        let filters = try parseFilters(filtersObject, for: when)
        guard let list = object["actions"]?.array else { throw APIError.badRequest("actions: required, an array of 1 to 10 actions") }
        guard (1...10).contains(list.count) else { throw APIError.badRequest("actions: 1 to 10 actions") }
        var actions: [Action] = []
        var actionsJSON: [JSONValue] = []
        for (index, item) in list.enumerated() {
            let (action, json) = try parseAction(item, path: "actions[\(index)]", context: context)
            actions.append(action)
            actionsJSON.append(json)
        }
        var throttle = defaultThrottleMinutes
        if let value = object["throttleMinutes"], value != .null {
            guard let minutes = value.integer, (5...43200).contains(minutes) else {
                throw APIError.badRequest("throttleMinutes: an integer from 5 to 43200")
            }
            throttle = minutes
        }
        var enabled = true
        if let value = object["enabled"], value != .null {
            guard case .bool(let flag) = value else { throw APIError.badRequest("enabled: must be true or false") }
            enabled = flag
        }
        let json: [String: JSONValue] = [
            "name": .string(name), "when": .object(whenObject), "filters": .object(filtersObject), "actions": .array(actionsJSON),
            "throttleMinutes": .number(Double(throttle)), "enabled": .bool(enabled),
        ]
        return AlertRule(
            name: name, when: when, filters: filters, actions: actions, throttleMinutes: throttle, enabled: enabled, json: json)
    }

    private static func trigger(_ object: [String: JSONValue]) throws -> Trigger {
        guard let type = object["type"]?.string else {
            throw APIError.badRequest("when.type: required, one of \(allTypes)")
        }
        let allowed: Set<String>
        let trigger: Trigger
        switch type {
        case "group.new": (trigger, allowed) = (.groupNew, [])
        case "group.regressed": (trigger, allowed) = (.groupRegressed, [])
        case "group.reappeared": (trigger, allowed) = (.groupReappeared, [])
        case "spike": (trigger, allowed) = (.spike, [])
        case "frequency", "devices":
            let count = try number(object, "count", range: 1...1_000_000)
            let window = try number(object, "windowMinutes", range: 1...10080)
            trigger = type == "frequency" ? .frequency(count: count, windowMinutes: window) : .devices(count: count, windowMinutes: window)
            allowed = ["count", "windowMinutes"]
        case "crashFreeSessions":
            guard case .number(let below) = object["below"], below > 0, below <= 1 else {
                throw APIError.badRequest("when.below: required, a number in (0, 1]")
            }
            var release: String?
            if let value = object["release"], value != .null {
                guard let text = value.string, (1...128).contains(text.utf8.count) else {
                    throw APIError.badRequest("when.release: a version of 1 to 128 bytes")
                }
                release = text
            }
            let minSessions = object["minSessions"] == nil ? 100 : try number(object, "minSessions", range: 1...1_000_000)
            let window = object["windowMinutes"] == nil ? 1440 : try number(object, "windowMinutes", range: 1...10080)
            trigger = .crashFreeSessions(below: below, release: release, minSessions: minSessions, windowMinutes: window)
            allowed = ["below", "release", "minSessions", "windowMinutes"]
        default:
            throw APIError.badRequest("when.type: unknown trigger '\(type.prefix(64))'; use \(allTypes)")
        }
        for key in object.keys.sorted() where key != "type" && !allowed.contains(key) {
            throw APIError.badRequest("when.\(key): not a parameter of \(type)")
        }
        return trigger
    }

    private static let allTypes = "group.new, group.regressed, group.reappeared, frequency, devices, spike, crashFreeSessions"

    private static func number(_ object: [String: JSONValue], _ key: String, range: ClosedRange<Int>) throws -> Int {
        guard let n = object[key]?.integer, range.contains(n) else {
            throw APIError.badRequest("when.\(key): required, an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return n
    }

    private static let filterNames = ["environment", "version", "kind", "fatal", "os", "context"]

    private static func parseFilters(_ object: [String: JSONValue], for when: Trigger) throws -> Filters {
        let allowed: Set<String>
        switch when {
        case .spike: allowed = ["kind", "fatal"]
        case .crashFreeSessions: allowed = ["environment"]
        default: allowed = Set(filterNames)
        }
        var filters = Filters()
        for key in object.keys.sorted() {
            let path = "filters.\(key)"
            guard allowed.contains(key) else {
                if filterNames.contains(key) { throw APIError.badRequest("\(path): not a filter of \(when.type) rules") }
                throw APIError.badRequest("\(path): unknown filter; use environment, version, kind, fatal, os or context")
            }
            let value = object[key]!
            switch key {
            case "fatal":
                guard case .bool(let flag) = value else { throw APIError.badRequest("\(path): must be true or false") }
                filters.fatal = flag
            case "context":
                guard let entries = value.object, (1...16).contains(entries.count) else {
                    throw APIError.badRequest("\(path): an object of 1 to 16 string entries")
                }
                var context: [String: String] = [:]
                for (k, v) in entries {
                    guard let text = v.string else { throw APIError.badRequest("\(path): the value of '\(k.prefix(64))' must be a string") }
                    context[k] = text
                }
                filters.context = context
            default:
                let list = try strings(value, path: path)
                if key == "kind" {
                    for kind in list where ReportKind(rawValue: kind) == nil {
                        throw APIError.badRequest("\(path): unknown kind '\(kind.prefix(64))'")
                    }
                }
                switch key {
                case "environment": filters.environment = list
                case "version": filters.version = list
                case "kind": filters.kind = list
                default: filters.os = list
                }
            }
        }
        return filters
    }

    private static func strings(_ value: JSONValue, path: String) throws -> [String] {
        if let text = value.string { return [text] }
        guard let list = value.array else { throw APIError.badRequest("\(path): a string or an array of strings") }
        guard !list.isEmpty else { throw APIError.badRequest("\(path): an empty array matches nothing; leave the filter out") }
        return try list.map {
            guard let text = $0.string else { throw APIError.badRequest("\(path): a string or an array of strings") }
            return text
        }
    }

    private static func parseAction(_ item: JSONValue, path: String, context: Context) throws -> (Action, JSONValue) {
        guard let object = item.object else { throw APIError.badRequest("\(path): must be an object") }
        guard let type = object["type"]?.string else { throw APIError.badRequest("\(path).type: required, webhook or email") }
        switch type {
        case "webhook":
            let text = object["webhook"]?.string ?? object["webhook"]?.integer.map(String.init)
            guard let text, let id = Int64(text), context.webhooks.contains(id) else {
                throw APIError.badRequest("\(path).webhook: not a webhook of this project")
            }
            for key in object.keys.sorted() where key != "type" && key != "webhook" {
                throw APIError.badRequest("\(path).\(key): not a field of a webhook action")
            }
            return (.webhook(id), .object(["type": .string("webhook"), "webhook": .string(String(id))]))
        case "email":
            guard context.email else {
                throw APIError.badRequest("\(path).type: this server sends no e-mail (set CRASHGUARD_SMTP_URL)")
            }
            guard let list = object["to"]?.array, (1...20).contains(list.count) else {
                throw APIError.badRequest("\(path).to: an array of 1 to 20 addresses")
            }
            var to: [String] = []
            for entry in list {
                guard let address = entry.string, EmailAddress.isPlain(address) else {
                    throw APIError.badRequest("\(path).to: not a plain local@domain address of at most 254 bytes")
                }
                if !to.contains(address) { to.append(address) }
            }
            for key in object.keys.sorted() where key != "type" && key != "to" {
                throw APIError.badRequest("\(path).\(key): not a field of an email action")
            }
            return (.email(to), .object(["type": .string("email"), "to": .array(to.map(JSONValue.string))]))
        default:
            throw APIError.badRequest("\(path).type: unknown action '\(type.prefix(64))'; use webhook or email")
        }
    }
}

/// E-mail addresses as the rules take them.
enum EmailAddress {
    /// A plain `local@domain` of at most 254 bytes: no display name, comment, quotes, spaces
    /// or control characters (so an address can never add a header), one `@`, a dotted domain.
    static func isPlain(_ text: String) -> Bool {
        guard text.utf8.count <= 254, let at = text.firstIndex(of: "@") else { return false }
        let local = text[..<at]
        let domain = text[text.index(after: at)...]
        guard !local.isEmpty, local.utf8.count <= 64, !domain.isEmpty, domain.contains("."), !domain.hasPrefix("."),
            !domain.hasSuffix("."), !domain.contains("..")
        else { return false }
        let localAllowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~.".utf8)
        let domainAllowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.".utf8)
        return local.utf8.allSatisfy(localAllowed.contains) && domain.utf8.allSatisfy(domainAllowed.contains)
            && !local.hasPrefix(".") && !local.hasSuffix(".") && !local.contains("..")
    }
}

/// How a message names a rule's event.
enum AlertEventWords {
    /// `New crash`, `Regressed crash`, `Reappeared crash`, `Frequent crash`, `Crash on many
    /// devices`, `Crash spike`; the event name itself for any other.
    static func words(_ event: String) -> String {
        switch event {
        case "group.new": "New crash"
        case "group.regressed": "Regressed crash"
        case "group.reappeared": "Reappeared crash"
        case "group.frequency": "Frequent crash"
        case "group.devices": "Crash on many devices"
        case "group.spike": "Crash spike"
        default: event
        }
    }
}
