import Foundation
import Logging

/// One setting of ``ServerConfiguration``: its environment variable, its flag, a one-line
/// summary and its rule, bound by key path to the property that holds its type and default.
///
/// Everything that reads, checks or documents a setting goes through
/// ``ServerConfiguration/settings``: the environment (``ServerConfiguration/init(environment:)``),
/// the executable's flags (``ServerConfiguration/init(flags:environment:command:)``),
/// ``ServerConfiguration/validate()``, `--help` and the settings tables in README.md and
/// Deploy/README.md (`SettingsTableTests` holds those to this list).
public struct Setting: Sendable {
    /// The environment variable, e.g. `CRASHGUARD_PORT`.
    public let name: String
    /// Which commands take the setting as a flag.
    public let scope: Scope
    /// One line for `--help` and the settings tables.
    public let summary: String
    /// The default as the environment spells it (`1048576`, `info`, `10`); empty when unset.
    public let defaultText: String
    /// Variables read before ``name`` when ``name`` is unset (`LOG_LEVEL`).
    let fallbacks: [String]
    /// Parses a value and stores it; false: the text is not a value of the setting's type.
    let assign: @Sendable (inout ServerConfiguration, String) throws(ConfigurationError) -> Bool
    /// The rule's complaint about the value a configuration holds; nil: it is fine.
    let problem: @Sendable (ServerConfiguration) -> String?

    /// Which commands take a setting as a flag.
    public enum Scope: Sendable, Equatable {
        /// Every command that reads the configuration (`serve`, `migrate`, `project`, ...).
        case everyCommand
        /// `serve` only: the settings of the running server.
        case serve
        /// None: a secret, kept out of the process list.
        case environmentOnly
    }

    /// `--port` for `CRASHGUARD_PORT`, `--database-url` for `DATABASE_URL`; nil when the
    /// setting is environment-only.
    public var flag: String? {
        guard scope != .environmentOnly else { return nil }
        let bare = name.hasPrefix("CRASHGUARD_") ? name.dropFirst("CRASHGUARD_".count) : name[...]
        return "--" + bare.lowercased().replacingOccurrences(of: "_", with: "-")
    }

    /// The name its errors use: `max connections` for `CRASHGUARD_MAX_CONNECTIONS`.
    static func label(of name: String) -> String {
        let bare = name.hasPrefix("CRASHGUARD_") ? name.dropFirst("CRASHGUARD_".count) : name[...]
        return bare.lowercased().replacingOccurrences(of: "_", with: " ")
    }

    /// Declares a setting of the property at `path`; its default is that property's in
    /// `ServerConfiguration()`. `parse` replaces the type's own parsing where a value needs
    /// more than its type to be read (it throws naming what is wrong).
    init<Value: SettingValue>(
        _ path: WritableKeyPath<ServerConfiguration, Value>, _ name: String, _ scope: Scope,
        _ summary: String, _ rule: Rule<Value> = .any, fallbacks: [String] = [],
        parse: (@Sendable (String) throws(ConfigurationError) -> Value?)? = nil
    ) {
        // Key paths to stored properties are immutable values, safe to share.
        nonisolated(unsafe) let path = path
        self.name = name
        self.scope = scope
        self.summary = summary
        self.fallbacks = fallbacks
        self.defaultText = ServerConfiguration()[keyPath: path].settingText
        self.assign = { (configuration: inout ServerConfiguration, text: String) throws(ConfigurationError) -> Bool in
            let parsed = if let parse { try parse(text) } else { Value(settingText: text) }
            guard let value = parsed else { return false }
            configuration[keyPath: path] = value
            return true
        }
        let label = Self.label(of: name)
        self.problem = { configuration in rule.problem(configuration[keyPath: path]).map { "\(label): \($0)" } }
    }

    /// What values a setting takes; a value outside is refused at start with the rule's text.
    struct Rule<Value>: Sendable {
        /// Nil when the value is fine, else what it should be (`at least 1`).
        let problem: @Sendable (Value) -> String?

        init(_ problem: @escaping @Sendable (Value) -> String?) { self.problem = problem }

        /// Any value of the type.
        static var any: Self { Self { _ in nil } }

        /// `check(value)` or `text`.
        static func when(_ text: String, _ check: @escaping @Sendable (Value) -> Bool) -> Self {
            Self { check($0) ? nil : text }
        }
    }
}

extension Setting.Rule where Value: Comparable & SettingValue & Sendable {
    /// `bound` or more.
    static func atLeast(_ bound: Value) -> Self { .when("at least \(bound.settingText)") { $0 >= bound } }

    /// Within `range`, said as `1...16`.
    static func within(_ range: ClosedRange<Value>) -> Self {
        .when("\(range.lowerBound.settingText)...\(range.upperBound.settingText)") { range.contains($0) }
    }
}

/// A type a setting can hold: parsed from and written as the environment's text.
protocol SettingValue: SendableMetatype {
    /// Nil when `settingText` is not a value of the type.
    init?(settingText: String)
    /// The value as the environment spells it.
    var settingText: String { get }
}

extension String: SettingValue {
    init?(settingText: String) { self = settingText }
    var settingText: String { self }
}

extension Int: SettingValue {
    init?(settingText: String) { self.init(settingText) }
    var settingText: String { String(self) }
}

extension Int64: SettingValue {
    init?(settingText: String) { self.init(settingText) }
    var settingText: String { String(self) }
}

extension Double: SettingValue {
    init?(settingText: String) { self.init(settingText) }
    var settingText: String { isFinite && rounded() == self && abs(self) < 1e15 ? String(Int64(self)) : String(self) }
}

/// Durations are written in seconds, fractions allowed (`0.5`).
extension Duration: SettingValue {
    init?(settingText: String) {
        guard let seconds = Double(settingText), seconds.isFinite, abs(seconds) < 1e12 else { return nil }
        self = .seconds(seconds)
    }
    var settingText: String {
        let (seconds, attoseconds) = components
        return attoseconds == 0 ? String(seconds) : String(Double(seconds) + Double(attoseconds) / 1e18)
    }
}

extension Logger.Level: SettingValue {
    init?(settingText: String) { self.init(rawValue: settingText) }
    var settingText: String { rawValue }
}

/// A comma-separated list; blanks around items and empty items are dropped.
extension Array: SettingValue where Element == String {
    init?(settingText: String) {
        self = settingText.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
    var settingText: String { joined(separator: ",") }
}
