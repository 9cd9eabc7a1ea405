import CrashWire
import Foundation

/// The condition of a snooze: a group ignored until a time, until its N-th new report, or until
/// N distinct devices among its new reports (triage.md, "Snooze").
enum SnoozeCondition: Sendable, Equatable {
    case until(Date)
    case count(Int)
    case devices(Int)

    /// Most new reports or devices a condition may wait for.
    static let maxCount = 1_000_000
    /// Furthest ahead an `until` may be.
    static let maxAhead: TimeInterval = 366 * 86_400

    /// The condition as the activity's `data` and the body's fields spell it.
    var data: [String: ActivityValue] {
        switch self {
        case .until(let date): ["until": .time(date)]
        case .count(let n): ["untilCount": .int(Int64(n))]
        case .devices(let n): ["untilDevices": .int(Int64(n))]
        }
    }
}

/// A triage change to one group or to every group of a list: a status (with `resolvedIn` or a
/// snooze condition) and/or an assignee. Checked as a whole (``parse(_:now:)``).
struct GroupChange: Sendable, Equatable {
    var status: GroupStatus?
    /// Kept with `resolved` only.
    var resolvedIn: String?
    /// With `ignored` only.
    var snooze: SnoozeCondition?
    /// nil: leave the assignee; `.some(nil)`: unassign; `.some(address)`: assign.
    var assignee: String??

    /// Parses a `PATCH` body; every mistake is a 400 naming the field.
    static func parse(_ bytes: some Collection<UInt8>, now: Date = Date()) throws -> GroupChange {
        guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: Data(bytes)) else {
            throw APIError.badRequest(#"status: body must be a JSON object like {"status": "resolved", "resolvedIn": "1.4.0"}"#)
        }
        var change = GroupChange()
        if let value = object["assignee"] {
            if value == .null {
                change.assignee = .some(nil)
            } else {
                guard case .string(let text) = value, Self.isAssignee(text) else {
                    throw APIError.badRequest("assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null")
                }
                change.assignee = .some(text)
            }
        }
        if object["status"] != nil || change.assignee == nil {
            guard case .string(let text)? = object["status"] else { throw APIError.badRequest("status: required, a string") }
            guard let status = GroupStatus(rawValue: text), status != .regressed else {
                throw APIError.badRequest("status: must be resolved, ignored or open")
            }
            change.status = status
        }
        if let value = object["resolvedIn"], value != .null {
            guard case .string(let version) = value, (1...128).contains(version.utf8.count) else {
                throw APIError.badRequest("resolvedIn: must be a version string of 1 to 128 bytes")
            }
            if change.status == .resolved { change.resolvedIn = version }
        }
        for field in ["until", "untilCount", "untilDevices"] {
            guard let value = object[field], value != .null else { continue }
            guard change.status == .ignored else { throw APIError.badRequest("\(field): a snooze condition needs status ignored") }
            guard change.snooze == nil else {
                throw APIError.badRequest("\(field): at most one of until, untilCount and untilDevices")
            }
            change.snooze = try condition(field, value, now: now)
        }
        return change
    }

    private static func condition(_ field: String, _ value: JSONValue, now: Date) throws -> SnoozeCondition {
        if field == "until" {
            guard case .string(let text) = value, let date = RFC3339.parse(text) else {
                throw APIError.badRequest("until: must be an RFC 3339 time")
            }
            guard date > now, date.timeIntervalSince(now) <= SnoozeCondition.maxAhead else {
                throw APIError.badRequest("until: must be after now and at most 366 days ahead")
            }
            return .until(date)
        }
        guard case .number(let number) = value, let n = Int(exactly: number), (1...SnoozeCondition.maxCount).contains(n)
        else { throw APIError.badRequest("\(field): must be an integer from 1 to 1000000") }
        return field == "untilCount" ? .count(n) : .devices(n)
    }

    /// 3 to 254 bytes, one `@` with something on both sides, no white space.
    static func isAssignee(_ text: String) -> Bool {
        guard (3...254).contains(text.utf8.count), !text.unicodeScalars.contains(where: { $0.properties.isWhitespace }) else {
            return false
        }
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
    }
}

/// A value in an activity entry's `data`: a string, a time, an integer or null.
enum ActivityValue: Codable, Sendable, Equatable {
    case string(String)
    case time(Date)
    case int(Int64)
    case null

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let n = try? c.decode(Int64.self) {
            self = .int(n)
        } else {
            self = .string(try c.decode(String.self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .string(let s): try c.encode(s)
        case .time(let d): try c.encode(RFC3339.format(d))
        case .int(let n): try c.encode(n)
        case .null: try c.encodeNil()
        }
    }
}

/// What happened to a group (triage.md, "Activity and comments").
enum ActivityType: String, Codable, Sendable, CaseIterable {
    case created, resolved, ignored, snoozed, reopened, regressed, reappeared, assigned, unassigned, merged, unmerged, comment
}

/// One entry of a group's activity timeline.
struct ActivityEntry: Codable, Sendable, Equatable {
    var id: String
    var at: Date
    var type: ActivityType
    /// The principal's name (``Principal/name``), `"system"` for automatic entries.
    var actor: String
    var data: [String: ActivityValue]
}

/// `GET .../crashes/{id}/activity`: newest first.
struct ActivityListBody: Codable, Sendable {
    var activity: [ActivityEntry]
    @NullWhenAbsent var nextCursor: String?
}

/// A group's snooze as its body shows it: since when, and the condition with its progress.
struct SnoozeBody: Codable, Sendable, Equatable {
    var since: Date
    var until: Date?
    var untilCount: Int?
    /// New reports since the snooze (with `untilCount`).
    var count: Int64?
    var untilDevices: Int?
    /// Distinct new devices since the snooze (with `untilDevices`).
    var devices: Int64?
}
