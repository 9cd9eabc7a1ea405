import CrashIngest
import CrashWire
import Foundation

/// A JSON value as decoded, keeping integers apart from other numbers, so that each field of a
/// session update can be checked and its error can name it.
///
/// Only what an update or an aggregate can hold is decoded: the known fields of an object
/// (``knownKeys``), scalars, and the `sessions` and `aggregates` arrays. Anything else is
/// ``other``, skipped unread: a body of many values in fields nobody reads costs the scan of
/// its bytes, not a value per element.
enum SessionJSON: Decodable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([SessionJSON])
    case object([String: SessionJSON])
    /// A value of a kind no field takes (an array or object where a scalar belongs), not decoded.
    case other

    /// The names read anywhere in an update, its `attrs`, a `sessions` item or an aggregate.
    static let knownKeys: Set<String> = [
        "sid", "did", "seq", "init", "started", "timestamp", "duration", "status", "errors", "attrs", "release",
        "environment", "aggregates", "exited", "errored", "abnormal", "crashed", "sessions",
    ]
    /// The keys that hold a string, and an integer, in a valid update or aggregate.
    static let stringKeys: Set<String> = ["sid", "did", "started", "timestamp", "status", "release", "environment"]
    static let integerKeys: Set<String> = ["seq", "errors", "exited", "errored", "abnormal", "crashed"]
    /// The keys whose arrays are read element by element.
    static let listKeys: Set<String> = ["sessions", "aggregates"]

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// Most elements of a list decoded: one more than a batch may hold, so that a longer one
    /// is refused without decoding the rest.
    static let maxListElements = 1001

    /// A list's elements, at most ``maxListElements`` of them.
    private struct Elements: Decodable {
        var values: [SessionJSON]

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            values = []
            while !container.isAtEnd, values.count < SessionJSON.maxListElements {
                values.append(try container.decode(SessionJSON.self))
            }
        }
    }

    init(from decoder: any Decoder) throws {
        if let object = try? decoder.container(keyedBy: Key.self) {
            var fields: [String: SessionJSON] = [:]
            for key in object.allKeys where Self.knownKeys.contains(key.stringValue) {
                // The type a field holds when valid, tried first: no failed attempt on a valid update.
                if Self.stringKeys.contains(key.stringValue), let text = try? object.decode(String.self, forKey: key) {
                    fields[key.stringValue] = .string(text)
                } else if Self.integerKeys.contains(key.stringValue), let n = try? object.decode(Int64.self, forKey: key) {
                    fields[key.stringValue] = .integer(n)
                } else if Self.listKeys.contains(key.stringValue), let list = try? object.decode(Elements.self, forKey: key) {
                    fields[key.stringValue] = .array(list.values)
                } else {
                    fields[key.stringValue] = try object.decode(SessionJSON.self, forKey: key)
                }
            }
            self = .object(fields)
            return
        }
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else {
            self = .other
        }
    }

    /// Decodes `bytes`; nil when they are not JSON.
    static func decode(_ bytes: some Collection<UInt8>) -> SessionJSON? {
        try? JSONDecoder().decode(SessionJSON.self, from: Data(bytes))
    }

    var object: [String: SessionJSON]? {
        if case .object(let value) = self { return value }
        return nil
    }
}

/// How a session ended, or `ok` while it runs (release-health.md, "Session updates").
enum SessionStatus: String, Sendable, CaseIterable {
    case ok, exited, errored, crashed, abnormal

    /// A final status: the session is counted in a final state once it gets one.
    var isFinal: Bool { self != .ok }
}

/// Where a session belongs: the app id and version of its `release`, and its environment.
struct SessionRelease: Hashable, Sendable {
    var appID: String
    var version: String
    var environment: String

    /// Splits a release string as the contract says: the app id before the first `@`
    /// (`unknown` without one), the version after it, without a `+build` suffix.
    static func split(_ release: String) -> (appID: String, version: String) {
        var appID = "unknown"
        var rest = Substring(release)
        if let at = release.firstIndex(of: "@") {
            let head = release[..<at]
            if !head.isEmpty { appID = String(head) }
            rest = release[release.index(after: at)...]
        }
        if let plus = rest.firstIndex(of: "+"), plus != rest.startIndex { rest = rest[..<plus] }
        return (appID, rest.isEmpty ? release : String(rest))
    }
}

/// Why an update or an aggregate was refused; `message` names the field.
struct SessionFieldError: Error, Sendable, Equatable {
    let message: String

    init(_ field: String, _ problem: String) { message = "\(field): \(problem)" }
}

/// One session update, checked (release-health.md): the session's whole state as the client
/// saw it.
struct SessionUpdate: Sendable, Equatable {
    var sid: UUID
    /// The user or install; nil for none (`""` and `null` included).
    var did: String?
    var seq: Int64
    var started: Date
    var status: SessionStatus
    var errors: Int64
    var duration: Double?
    var release: SessionRelease

    static let maxDidBytes = 128
    static let releaseBytes = 1...200
    static let environmentBytes = 1...64
    /// `started` must be within [now - 30 days, now + 1 day].
    static let pastDays: Double = 30
    static let futureDays: Double = 1

    /// Checks one element of a batch or one Sentry `session` item. Without a `sid`, Sentry's
    /// door gives the session a fresh one (`requireSID` false); `/v1/sessions` refuses it.
    static func parse(_ value: SessionJSON, now: Date, requireSID: Bool) -> Result<SessionUpdate, SessionFieldError> {
        guard let object = value.object else { return .failure(SessionFieldError("session", "not a JSON object")) }
        do {
            return .success(try parse(object, now: now, requireSID: requireSID))
        } catch let error as SessionFieldError {
            return .failure(error)
        } catch {
            return .failure(SessionFieldError("session", "\(error)"))
        }
    }

    private static func parse(_ o: [String: SessionJSON], now: Date, requireSID: Bool) throws -> SessionUpdate {
        let sid: UUID
        switch o["sid"] {
        case nil, .null?:
            guard !requireSID else { throw SessionFieldError("sid", "required") }
            sid = UUID()
        case .string(let text)?:
            guard let id = UUIDText.parse(text, compact: true) else { throw SessionFieldError("sid", "not a UUID") }
            sid = id
        default:
            throw SessionFieldError("sid", "not a UUID string")
        }
        var did: String?
        switch o["did"] {
        case nil, .null?: did = nil
        case .string(let text)?:
            guard text.utf8.count <= maxDidBytes else { throw SessionFieldError("did", "longer than \(maxDidBytes) bytes") }
            did = text.isEmpty ? nil : text
        default: throw SessionFieldError("did", "not a string")
        }
        var isInit = false
        switch o["init"] {
        case nil, .null?: break
        case .bool(let value)?: isInit = value
        default: throw SessionFieldError("init", "not a boolean")
        }
        guard let startedValue = o["started"], let started = date(startedValue) else {
            throw SessionFieldError("started", o["started"] == nil ? "required" : "not an RFC 3339 date-time")
        }
        try checkStarted(started, now: now, field: "started")
        if let timestamp = o["timestamp"], !isNull(timestamp), date(timestamp) == nil {
            throw SessionFieldError("timestamp", "not an RFC 3339 date-time")
        }
        var seq = isInit ? 0 : Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        switch o["seq"] {
        case nil, .null?: break
        case .integer(let value)? where value >= 0: seq = value
        default: throw SessionFieldError("seq", "not an integer from 0 to 2^63-1")
        }
        var duration: Double?
        switch o["duration"] {
        case nil, .null?: break
        case .integer(let value)? where value >= 0: duration = Double(value)
        case .number(let value)? where value >= 0 && value.isFinite: duration = value
        default: throw SessionFieldError("duration", "not a number of seconds >= 0")
        }
        var status = SessionStatus.ok
        switch o["status"] {
        case nil, .null?: break
        case .string("unhandled")?: status = .errored
        case .string(let text)?:
            guard let value = SessionStatus(rawValue: text) else {
                throw SessionFieldError("status", "not one of ok, exited, crashed, abnormal, errored")
            }
            status = value
        default: throw SessionFieldError("status", "not a string")
        }
        var errors: Int64 = 0
        switch o["errors"] {
        case nil, .null?: break
        case .integer(let value)? where value >= 0: errors = value
        default: throw SessionFieldError("errors", "not an integer >= 0")
        }
        let release = try attributes(o["attrs"], field: "attrs")
        return SessionUpdate(
            sid: sid, did: did, seq: seq, started: started, status: status, errors: errors, duration: duration, release: release)
    }

    /// `attrs`: `release` required (1 to 200 bytes), `environment` 1 to 64 bytes, `production`
    /// when absent.
    static func attributes(_ value: SessionJSON?, field: String) throws -> SessionRelease {
        guard let value, !isNull(value) else { throw SessionFieldError(field, "required") }
        guard let attrs = value.object else { throw SessionFieldError(field, "not an object") }
        guard case .string(let release)? = attrs["release"] else {
            throw SessionFieldError("\(field).release", attrs["release"] == nil ? "required" : "not a string")
        }
        guard releaseBytes.contains(release.utf8.count) else {
            throw SessionFieldError("\(field).release", "must be 1 to 200 bytes")
        }
        var environment = "production"
        switch attrs["environment"] {
        case nil, .null?: break
        case .string(let text)?:
            guard environmentBytes.contains(text.utf8.count) else {
                throw SessionFieldError("\(field).environment", "must be 1 to 64 bytes")
            }
            environment = text
        default: throw SessionFieldError("\(field).environment", "not a string")
        }
        let (appID, version) = SessionRelease.split(release)
        return SessionRelease(appID: appID, version: version, environment: environment)
    }

    static func checkStarted(_ started: Date, now: Date, field: String) throws {
        guard started >= now.addingTimeInterval(-pastDays * 86_400), started <= now.addingTimeInterval(futureDays * 86_400) else {
            throw SessionFieldError(field, "outside [now - 30 days, now + 1 day]")
        }
    }

    /// An RFC 3339 string, or Unix seconds (some SDKs send numbers).
    static func date(_ value: SessionJSON) -> Date? {
        switch value {
        case .string(let text): return RFC3339.parse(text)
        case .integer(let seconds): return Date(timeIntervalSince1970: Double(seconds))
        case .number(let seconds) where seconds.isFinite: return Date(timeIntervalSince1970: seconds)
        default: return nil
        }
    }

    static func isNull(_ value: SessionJSON) -> Bool {
        if case .null = value { return true }
        return false
    }
}

/// One entry of a Sentry `sessions` item: sessions started in one minute, added as sent.
struct SessionAggregate: Sendable, Equatable {
    var started: Date
    var did: String?
    var exited: Int64
    var errored: Int64
    var abnormal: Int64
    var crashed: Int64
    var release: SessionRelease

    /// Sessions started: every ended one, whatever its state.
    var sessions: Int64 { exited + errored + abnormal + crashed }

    /// The valid entries of a `sessions` item; none without `attrs.release`, invalid entries dropped.
    static func parse(_ value: SessionJSON, now: Date) -> [SessionAggregate] {
        guard let object = value.object, let release = try? SessionUpdate.attributes(object["attrs"], field: "attrs"),
            case .array(let entries)? = object["aggregates"]
        else { return [] }
        return entries.compactMap { entry -> SessionAggregate? in
            guard let o = entry.object, let startedValue = o["started"], let started = SessionUpdate.date(startedValue),
                (try? SessionUpdate.checkStarted(started, now: now, field: "started")) != nil
            else { return nil }
            var counts: [Int64] = []
            for name in ["exited", "errored", "abnormal", "crashed"] {
                switch o[name] {
                case nil, .null?: counts.append(0)
                case .integer(let n)? where n >= 0 && n <= Int64(Int32.max): counts.append(n)
                default: return nil
                }
            }
            var did: String?
            switch o["did"] {
            case nil, .null?: break
            case .string(let text)? where text.utf8.count <= SessionUpdate.maxDidBytes: did = text.isEmpty ? nil : text
            default: return nil
            }
            return SessionAggregate(
                started: started, did: did, exited: counts[0], errored: counts[1], abnormal: counts[2], crashed: counts[3],
                release: release)
        }
    }
}
