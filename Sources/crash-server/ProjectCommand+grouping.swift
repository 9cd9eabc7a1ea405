import ArgumentParser
import CrashGrouping
import CrashServer

extension GroupingVersion: ExpressibleByArgument {}

extension ProjectCommand {
    /// `crash-server project grouping NAME v1|v2 [--preview [--days N]]`.
    struct SetGrouping: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "grouping",
            abstract: "Switch the grouping version of a project's new reports, or preview the switch.",
            discussion: """
                Groups keep the version they were made with: switching never regroups stored \
                reports, it only decides how reports from now on are grouped. With --preview, \
                nothing changes: the project's reports of the last --days days are grouped with \
                VERSION and compared with the groups they are in (groups split, merged, unchanged).
                """
        )
        @OptionGroup var common: CommonOptions
        @Argument(help: "Project slug.") var name: String
        @Argument(help: "v1 or v2.") var version: GroupingVersion
        @Flag(help: "Report how recent reports would regroup; change nothing.") var preview = false
        @Option(help: "With --preview: how many days of reports to regroup (1 to 3660).") var days = 7

        func validate() throws {
            if !(1...3660).contains(days) { throw ValidationError("--days must be 1 to 3660") }
        }

        func run() async throws {
            let config = try common.configuration()
            let output = try await withDatabase(config, logger: makeLogger(config)) { db in
                try await PostgresSchemaMaintenance(database: db).migrate()
                if preview {
                    return try await PostgresProjectStore(database: db).groupingPreview(slug: name, target: version, days: days).json()
                }
                let previous = try await PostgresProjectStore(database: db).setGroupingVersion(slug: name, to: version)
                return #"{"groupingVersion":"\#(version)","previousGroupingVersion":"\#(previous)","project":"\#(name)"}"#
            }
            print(output)
        }
    }
}
