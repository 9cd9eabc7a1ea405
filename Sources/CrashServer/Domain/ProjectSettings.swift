import CrashIngest
import Foundation

/// A project's data-protection settings (data-protection.md, "Project settings"): what the
/// scrubber does to its reports, how long they are kept and how many a day are stored.
///
/// A project without a stored row has ``init()``'s defaults. `retentionDays` and `dailyQuota`
/// are nil when unset: the server's `CRASHGUARD_RETENTION_DAYS`, and no quota.
struct ProjectSettings: Sendable, Equatable {
    var scrubDefaults = true
    var scrubIPs = false
    var scrubEmails = false
    var sensitiveFields: [String] = []
    var safeFields: [String] = []
    /// RE2 syntax, case-sensitive unless `(?i)`; each match becomes `[Filtered]`.
    var patterns: [String] = []
    /// Nil: the server's default (``retentionDays(serverDefault:)``).
    var retentionDays: Int?
    /// Reports newly stored per UTC day; nil: no quota, 0: none at all.
    var dailyQuota: Int?

    static let retentionDaysRange = 7...365
    static let dailyQuotaRange = 0...Int(Int32.max)
    static let maxFields = 50
    static let fieldBytes = 1...64
    static let maxPatterns = 20
    static let patternBytes = 1...256

    /// The retention in force: the project's own, or the server's.
    func retentionDays(serverDefault: Int) -> Int { retentionDays ?? serverDefault }

    /// What the scrubber needs, less the compiled patterns.
    var scrub: ScrubSettings {
        ScrubSettings(
            scrubDefaults: scrubDefaults, scrubIPs: scrubIPs, scrubEmails: scrubEmails, sensitiveFields: sensitiveFields,
            safeFields: safeFields)
    }

    /// The fields a `PATCH` may set, sorted (an unknown one is refused by name).
    static let writableFields: Set<String> = [
        "scrubDefaults", "scrubIPs", "scrubEmails", "sensitiveFields", "safeFields", "patterns", "retentionDays", "dailyQuota",
    ]
    /// Fields the body shows that no `PATCH` may set.
    static let readOnlyFields: Set<String> = ["quotaUsedToday"]

    /// These settings with a `PATCH` body applied: all of it or, on the first field (in name
    /// order) that is unknown, read-only, of the wrong type or out of its limits, a 400 naming
    /// it and nothing.
    func patched(with body: [UInt8]) throws -> ProjectSettings {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(body)), let object = value.object else {
            throw APIError.badRequest("body: expected a JSON object of settings")
        }
        var out = self
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            if Self.readOnlyFields.contains(key) { throw APIError.badRequest("\(key): read-only") }
            guard Self.writableFields.contains(key) else {
                throw APIError.badRequest(
                    "\(key.prefix(64)): unknown field; settings are \(Self.writableFields.sorted().joined(separator: ", "))")
            }
            switch key {
            case "scrubDefaults": out.scrubDefaults = try Self.bool(value, key)
            case "scrubIPs": out.scrubIPs = try Self.bool(value, key)
            case "scrubEmails": out.scrubEmails = try Self.bool(value, key)
            case "sensitiveFields": out.sensitiveFields = try Self.strings(value, key, most: Self.maxFields, bytes: Self.fieldBytes)
            case "safeFields": out.safeFields = try Self.strings(value, key, most: Self.maxFields, bytes: Self.fieldBytes)
            case "patterns":
                let patterns = try Self.strings(value, key, most: Self.maxPatterns, bytes: Self.patternBytes)
                for (i, pattern) in patterns.enumerated() {
                    if let problem = ScrubPatterns.problem(with: pattern) {
                        throw APIError.badRequest("patterns[\(i)]: not a valid RE2 regular expression: \(problem)")
                    }
                }
                out.patterns = patterns
            case "retentionDays": out.retentionDays = try Self.integer(value, key, in: Self.retentionDaysRange, nullable: true)
            default: out.dailyQuota = try Self.integer(value, key, in: Self.dailyQuotaRange, nullable: true)
            }
        }
        return out
    }

    private static func bool(_ value: JSONValue, _ key: String) throws -> Bool {
        guard case .bool(let b) = value else { throw APIError.badRequest("\(key): expected true or false") }
        return b
    }

    private static func strings(_ value: JSONValue, _ key: String, most: Int, bytes: ClosedRange<Int>) throws -> [String] {
        guard let array = value.array else { throw APIError.badRequest("\(key): expected an array of strings") }
        guard array.count <= most else { throw APIError.badRequest("\(key): \(array.count) entries; at most \(most)") }
        return try array.enumerated().map { i, element in
            guard let s = element.string else { throw APIError.badRequest("\(key)[\(i)]: expected a string") }
            guard bytes.contains(s.utf8.count) else {
                throw APIError.badRequest(
                    "\(key)[\(i)]: \(s.utf8.count) bytes; each is \(bytes.lowerBound) to \(bytes.upperBound) bytes")
            }
            return s
        }
    }

    private static func integer(_ value: JSONValue, _ key: String, in range: ClosedRange<Int>, nullable: Bool) throws -> Int? {
        if value == .null && nullable { return nil }
        guard let n = value.integer, range.contains(n) else {
            throw APIError.badRequest(
                "\(key): expected an integer from \(range.lowerBound) to \(range.upperBound)\(nullable ? " or null" : "")")
        }
        return n
    }
}

/// The body of `GET .../settings` and of `PATCH`'s 200: every field, `retentionDays` as in
/// force, `dailyQuota` null when there is none.
struct ProjectSettingsBody: Encodable, Sendable, Equatable {
    var scrubDefaults: Bool
    var scrubIPs: Bool
    var scrubEmails: Bool
    var sensitiveFields: [String]
    var safeFields: [String]
    var patterns: [String]
    var retentionDays: Int
    @NullWhenAbsent var dailyQuota: Int?
    var quotaUsedToday: Int

    init(_ settings: ProjectSettings, serverRetentionDays: Int, quotaUsedToday: Int) {
        scrubDefaults = settings.scrubDefaults
        scrubIPs = settings.scrubIPs
        scrubEmails = settings.scrubEmails
        sensitiveFields = settings.sensitiveFields
        safeFields = settings.safeFields
        patterns = settings.patterns
        retentionDays = settings.retentionDays(serverDefault: serverRetentionDays)
        dailyQuota = settings.dailyQuota
        self.quotaUsedToday = quotaUsedToday
    }
}
