/// The executable's flags: each setting whose ``Setting/scope`` admits the command is a flag
/// named after its environment variable (`--port` for `CRASHGUARD_PORT`), looked up in
/// ``ServerConfiguration/settings``; none is declared anywhere else.
extension ServerConfiguration {
    /// Splits command-line words into the settings' flags with their values (`--name value` or
    /// `--name=value`, any setting that has a flag) and the rest, both in order, so that the
    /// commands parse only their own arguments.
    public static func splitSettingFlags(_ words: [String]) -> (settings: [String], rest: [String]) {
        let known = Set(Self.settings.compactMap(\.flag))
        var taken: [String] = []
        var rest: [String] = []
        var words = words[...]
        while let word = words.popFirst() {
            if word == "--" {  // everything after the terminator is the commands'
                rest.append(word)
                rest.append(contentsOf: words)
                break
            }
            guard known.contains(flagName(word)) else {
                rest.append(word)
                continue
            }
            taken.append(word)
            if !word.contains("="), let value = words.popFirst() { taken.append(value) }
        }
        return (taken, rest)
    }

    /// The defaults, overridden by `environment`, overridden by `flags` (words that
    /// ``splitSettingFlags(_:)`` took out); throws for a flag `command` does not take.
    public init(flags: [String], environment: [String: String], command: Setting.Command) throws(ConfigurationError) {
        try self.init(environment: environment)
        let byFlag = Dictionary(
            Self.settings.filter { $0.takes(command) }.compactMap { setting in setting.flag.map { ($0, setting) } },
            uniquingKeysWith: { first, _ in first })
        var words = flags[...]
        while let word = words.popFirst() {
            let flag = Self.flagName(word)
            guard let setting = byFlag[flag] else { throw ConfigurationError("unknown option '\(flag)'") }
            let attached = word.firstIndex(of: "=").map { String(word[word.index(after: $0)...]) }
            guard let text = attached ?? words.popFirst() else { throw ConfigurationError("\(flag): needs a value") }
            try read(setting, text, from: flag)
        }
    }

    /// `--name` of `--name` and `--name=value`.
    private static func flagName(_ word: String) -> String {
        String(word[..<(word.firstIndex(of: "=") ?? word.endIndex)])
    }

    /// Throws when a setting `command` uses is out of its range: every rule and how the
    /// settings fit together for `serve` (``validate()``), the rules of the settings of every
    /// command for the others.
    public func validate(for command: Setting.Command) throws {
        switch command {
        case .serve:
            try validate()
        case .other:
            for setting in Self.settings where setting.scope == .everyCommand {
                if let problem = setting.problem(self) { throw ConfigurationError(problem) }
            }
        }
    }

    /// The settings `command` takes as flags, two lines each: the flag, then what it is, its
    /// variable and its default; for `--help`.
    public static func flagHelp(for command: Setting.Command) -> String {
        let lines = settings.filter { $0.takes(command) }.compactMap { setting in
            setting.flag.map { flag in
                let value = setting.defaultText.isEmpty ? "" : ", default \(setting.defaultText)"
                return "  \(flag) <value>  (\(setting.name)\(value))\n        \(setting.summary)"
            }
        }
        return "Settings (a flag overrides its environment variable):\n" + lines.joined(separator: "\n")
    }

    /// The settings table of README.md: one row per setting, `| `NAME` | `default` | flag | summary |`.
    public static func markdownTable() -> String {
        var lines = ["| variable | default | flag | meaning |", "| --- | --- | --- | --- |"]
        for setting in settings {
            let flag = setting.flag.map { "`\($0)`\(setting.scope == .everyCommand ? " (every command)" : "")" } ?? "none"
            lines.append("| `\(setting.name)` | `\(setting.defaultText)` | \(flag) | \(setting.summary) |")
        }
        return lines.joined(separator: "\n")
    }
}

extension Setting {
    /// A command that reads the configuration, as far as its flags go.
    public enum Command: Sendable {
        /// `serve`: every setting that has a flag.
        case serve
        /// `migrate`, `project`, `top`, `debug-files`: the settings of every command.
        case other
    }

    /// Whether `command` takes this setting as a flag.
    public func takes(_ command: Command) -> Bool {
        switch (scope, command) {
        case (.environmentOnly, _): false
        case (.everyCommand, _): true
        case (.serve, .serve): true
        case (.serve, .other): false
        }
    }
}
