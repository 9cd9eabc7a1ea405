import Foundation
import Logging
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The one configuration source: README.md, Deploy/README.md and docker-compose.yml name
/// exactly the settings `ServerConfiguration.settings` declares, with their defaults, and the
/// flags and variables are read through that table.
@Suite struct SettingsTableTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    func text(_ path: String) throws -> String { try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8) }

    /// The rows `| `NAME` | `default` | ...` of the first table in `section` of `markdown`.
    func rows(_ markdown: String, section: String) throws -> [(name: String, defaultText: String)] {
        let start = try #require(markdown.range(of: "\n## \(section)\n"), "no section \(section)")
        let body = markdown[start.upperBound...]
        let end = body.range(of: "\n## ")?.lowerBound ?? body.endIndex
        return body[..<end].split(separator: "\n").compactMap { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 3, cells[1].hasPrefix("`"), cells[1].hasSuffix("`"), cells[1].count > 2 else { return nil }
            func bare(_ cell: String) -> String { String(cell.dropFirst(cell.hasPrefix("`") ? 1 : 0).dropLast(cell.hasSuffix("`") ? 1 : 0)) }
            return (bare(cells[1]), bare(cells[2]))
        }
    }

    @Test func readmeConfigurationTableIsTheGeneratedOne() throws {
        let readme = try text("README.md")
        let begin = "<!-- settings:begin (crash-server settings prints this table) -->\n"
        let start = try #require(readme.range(of: begin), "README.md has no generated settings table")
        let end = try #require(readme.range(of: "\n<!-- settings:end -->", range: start.upperBound..<readme.endIndex))
        let table = String(readme[start.upperBound..<end.lowerBound])
        #expect(table == ServerConfiguration.markdownTable(), "run `crash-server settings` and paste its table into README.md")
    }

    @Test func deployReadmeListsExactlyTheDeclaredSettingsAndDefaults() throws {
        let listed = try rows(text("Deploy/README.md"), section: "Configuration")
        #expect(listed.map(\.name) == ServerConfiguration.settings.map(\.name))
        let declared = Dictionary(uniqueKeysWithValues: ServerConfiguration.settings.map { ($0.name, $0.defaultText) })
        for row in listed {
            #expect(declared[row.name] == row.defaultText, "\(row.name): Deploy/README.md says '\(row.defaultText)'")
        }
    }

    @Test func composePassesOnlyDeclaredSettings() throws {
        let declared = Set(ServerConfiguration.settings.map(\.name))
        // Compose's own variables: the roles' passwords and the migrate service's URL.
        let composeOnly: Set = ["POSTGRES_PASSWORD", "POSTGRES_OWNER_PASSWORD", "POSTGRES_APP_PASSWORD", "MIGRATE_DATABASE_URL"]
        let compose = try text("docker-compose.yml")
        let entries = compose.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("- "), let first = trimmed.dropFirst(2).first, first.isUppercase else { return nil }
            return String(trimmed.dropFirst(2).prefix { $0.isUppercase || $0.isNumber || $0 == "_" })
        }
        #expect(entries.count > 10, "found no environment entries in docker-compose.yml")
        for name in entries { #expect(declared.contains(name), "docker-compose.yml passes \(name), which the server does not read") }
        let interpolated = compose.matches(of: /(^|[^$])\$\{([A-Z][A-Z0-9_]*)/).map { String($0.output.2) }
        for name in interpolated where !composeOnly.contains(name) {
            #expect(declared.contains(name), "docker-compose.yml interpolates \(name), which the server does not read")
        }
    }

    /// Every stored property is a declared setting, once: a property added without its row
    /// would be neither read nor documented.
    @Test func everyPropertyIsDeclaredOnce() {
        let properties =
            Mirror(reflecting: ServerConfiguration()).children.count - 3  // `webhooks`, `oidc` and `email` are groups
            + Mirror(reflecting: WebhookSettings()).children.count + Mirror(reflecting: OIDCSettings()).children.count
            + Mirror(reflecting: EmailSettings()).children.count
        #expect(ServerConfiguration.settings.count == properties)
        #expect(Set(ServerConfiguration.settings.map(\.name)).count == ServerConfiguration.settings.count)
        let flags = ServerConfiguration.settings.compactMap(\.flag)
        #expect(Set(flags).count == flags.count)
    }

    @Test func flagsOverrideVariablesWhichOverrideDefaults() throws {
        let config = try ServerConfiguration(
            flags: ["--port", "9", "--db-timeout=2.5", "--webhook-allow-hosts", "a.internal,b.internal:8443"],
            environment: ["CRASHGUARD_PORT": "7", "CRASHGUARD_HOST": "0.0.0.0", "LOG_LEVEL": "debug", "CRASHGUARD_RATE_LIMIT": ""],
            command: .serve)
        #expect(config.port == 9)
        #expect(config.host == "0.0.0.0")
        #expect(config.databaseTimeout == .seconds(2.5))
        #expect(config.logLevel == .debug)
        #expect(config.rateLimit == 1000)  // empty is unset
        #expect(config.webhooks.allowHosts == ["a.internal", "b.internal:8443"])
        let both = try ServerConfiguration(environment: ["LOG_LEVEL": "debug", "CRASHGUARD_LOG_LEVEL": "error"])
        #expect(both.logLevel == .error)
    }

    @Test func aCommandTakesOnlyItsFlags() throws {
        let migrate = try ServerConfiguration(flags: ["--database-url", "postgres://x@db/y"], environment: [:], command: .other)
        #expect(migrate.databaseURL == "postgres://x@db/y")
        #expect(throws: ConfigurationError.self) { try ServerConfiguration(flags: ["--port", "1"], environment: [:], command: .other) }
        #expect(throws: ConfigurationError.self) {
            try ServerConfiguration(flags: ["--session-secret", String(repeating: "s", count: 40)], environment: [:], command: .serve)
        }
        let error = #expect(throws: ConfigurationError.self) {
            try ServerConfiguration(flags: ["--ingest-share", "most"], environment: [:], command: .serve)
        }
        #expect(error?.description == "--ingest-share: cannot parse 'most'")
    }

    @Test func settingFlagsAreTakenOutOfTheCommandsArguments() {
        let (settings, rest) = ServerConfiguration.splitSettingFlags([
            "project", "create", "--grouping", "v1", "--database-url", "postgres://u:p,q@db/x", "myapp", "--public-url=https://c.example",
        ])
        #expect(settings == ["--database-url", "postgres://u:p,q@db/x", "--public-url=https://c.example"])
        #expect(rest == ["project", "create", "--grouping", "v1", "myapp"])
        let (afterTerminator, kept) = ServerConfiguration.splitSettingFlags(["top", "--", "--port", "1"])
        #expect(afterTerminator.isEmpty && kept == ["top", "--", "--port", "1"])
    }

    @Test func durationsAreSecondsInTheEnvironment() throws {
        let config = try ServerConfiguration(environment: [
            "CRASHGUARD_READ_TIMEOUT": "0.25", "CRASHGUARD_IDLE_TIMEOUT": "90", "CRASHGUARD_READ_MAX_LAG": "2.5",
        ])
        #expect(config.readTimeout == .milliseconds(250))
        #expect(config.idleTimeout == .seconds(90))
        #expect(config.readMaxLag == .milliseconds(2500))
        let defaults = Dictionary(uniqueKeysWithValues: ServerConfiguration.settings.map { ($0.name, $0.defaultText) })
        #expect(defaults["CRASHGUARD_IDLE_TIMEOUT"] == "75")
        #expect(defaults["CRASHGUARD_QUERY_TIMEOUT"] == "10")
        #expect(throws: ConfigurationError.self) { try ServerConfiguration(environment: ["CRASHGUARD_READ_TIMEOUT": "soon"]) }
    }
}
