import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The `crash-server` executable's argument handling, run as a child process.
@Suite struct CommandLineTests {
    @Test func projectNameStartingWithADashIsRefused() throws {
        let (status, output) = try crashServer(["project", "create", "-x"])
        #expect(status != 0, "\(output)")
        #expect(output.contains("invalid project name '-x'"), "\(output)")
        #expect(!output.contains("USAGE: crash-server project create") || output.contains("Error"), "\(output)")
    }

    /// The usage line shows the one name the command takes, not the array that catches dashes.
    @Test func projectCreateUsageTakesOneName() throws {
        let (status, output) = try crashServer(["project", "create", "--help"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("USAGE: crash-server project create <name> [--grouping <grouping>]"), "\(output)")
        #expect(!output.contains("<name> ..."), "\(output)")
    }

    /// A command on a database it cannot use says which and why at once, instead of waiting
    /// for the pool's minute of retries and ending in an error that named neither.
    @Test func anUnusableDatabaseIsNamedWithTheReason() throws {
        let (status, output) = try crashServer(["project", "list"])
        #expect(status != 0, "\(output)")
        #expect(output.contains("cannot use the database at 127.0.0.1:1:"), "\(output)")
        #expect(output.contains("refused"), "\(output)")
        var missing = try #require(URLComponents(string: TestEnvironment.databaseURL))
        missing.path = "/crashguard_no_such_database"
        let (status2, output2) = try crashServer(["project", "list"], database: try #require(missing.string))
        #expect(status2 != 0, "\(output2)")
        #expect(output2.contains(#"database "crashguard_no_such_database" does not exist"#), "\(output2)")
    }

    @Test func maxConnectionsIsAFlagAndAnEnvironmentVariable() throws {
        let (status, output) = try crashServer(["serve", "--max-connections", "0"])
        #expect(status != 0, "\(output)")
        #expect(output.contains("max connections: at least 1"), "\(output)")
        let config = try ServerConfiguration(environment: ["CRASHGUARD_MAX_CONNECTIONS": "7"])
        #expect(config.maxConnections == 7)
        #expect(ConnectionLimits(configuration: config).maxConnections == 7)
        #expect(ServerConfiguration().maxConnections == 10_000)
    }

    @Test func maxBatchBytesIsAFlagAndAnEnvironmentVariable() throws {
        let (status, output) = try crashServer(["serve", "--max-batch-bytes", "0"])
        #expect(status != 0, "\(output)")
        #expect(output.contains("max batch bytes: at least 1"), "\(output)")
        let config = try ServerConfiguration(environment: ["CRASHGUARD_MAX_BATCH_BYTES": "4096"])
        #expect(config.maxBatchBytes == 4096)
        #expect(ServerConfiguration().maxBatchBytes == 4 << 20)
    }

    @Test func ingestLanesIsAFlagAndAnEnvironmentVariable() throws {
        for bad in ["0", "17"] {
            let (status, output) = try crashServer(["serve", "--ingest-lanes", bad])
            #expect(status != 0, "\(output)")
            #expect(output.contains("ingest lanes: 1...16"), "\(output)")
        }
        let config = try ServerConfiguration(environment: ["CRASHGUARD_INGEST_LANES": "3"])
        #expect(config.ingestLanes == 3)
        #expect(ServerConfiguration().ingestLanes == 2)
    }

    @Test func ingestShareIsAFlagAndAnEnvironmentVariable() throws {
        for bad in ["0", "1", "1.5"] {
            let (status, output) = try crashServer(["serve", "--ingest-share", bad])
            #expect(status != 0, "\(output)")
            #expect(output.contains("ingest share: above 0 and below 1"), "\(output)")
        }
        let config = try ServerConfiguration(environment: ["CRASHGUARD_INGEST_SHARE": "0.5", "CRASHGUARD_MAX_CONCURRENT_REQUESTS": "10"])
        #expect(config.ingestShare == 0.5)
        let pools = RequestPools(limit: config.maxConcurrentRequests, ingestShare: config.ingestShare)
        #expect(pools.uploads.limit == 5 && pools.others.limit == 5)
        #expect(ServerConfiguration().ingestShare == 0.75)
        #expect(throws: ConfigurationError.self) { try ServerConfiguration(environment: ["CRASHGUARD_INGEST_SHARE": "most"]) }
    }
}
