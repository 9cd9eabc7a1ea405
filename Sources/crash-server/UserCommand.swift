import ArgumentParser
import CrashServer
import Foundation

/// `crash-server user create|list|disable|reset`: the accounts of people who sign in
/// (docs/accounts.md). The first server admin comes from here.
struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user",
        abstract: "Create, list and disable the users who sign in to the dashboard and the API.",
        subcommands: [Create.self, List.self, Disable.self, Reset.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a user; prints it and a one-time set-up link (24 hours) to choose a password.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "E-mail address.") var email: String
        @Option(help: "The name shown in activity and the audit log.") var name = ""
        @Flag(help: "A server admin: sees and manages every project and user.") var admin = false

        func run() async throws {
            let config = try common.configuration()
            let (email, name, admin) = (email, name, admin)
            print(
                try await withUsers(config) { try await $0.create(email: email, name: name, admin: admin) })
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users.")
        @OptionGroup var common: CommonOptions

        func run() async throws {
            print(try await withUsers(try common.configuration()) { try await $0.list() })
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Disable a user: ends its sessions and tokens at once.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "E-mail address.") var email: String

        func run() async throws {
            let email = email
            print(try await withUsers(try common.configuration()) { try await $0.disable(email: email) })
        }
    }

    struct Reset: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reset-password", abstract: "A new one-time set-up link (24 hours) for a user to choose a password.")
        @OptionGroup var common: CommonOptions
        @Argument(help: "E-mail address.") var email: String

        func run() async throws {
            let email = email
            print(try await withUsers(try common.configuration()) { try await $0.resetLink(email: email) })
        }
    }
}

/// Runs `body` with the user commands on the configured database (schema applied first).
private func withUsers(
    _ config: ServerConfiguration, _ body: @Sendable (UserAdministration) async throws -> String
) async throws
    -> String
{
    try await withDatabase(config, logger: makeLogger(config)) { db in
        try await PostgresSchemaMaintenance(database: db).migrate()
        return try await body(UserAdministration(database: db, publicURL: config.publicURL, logger: makeLogger(config)))
    }
}
