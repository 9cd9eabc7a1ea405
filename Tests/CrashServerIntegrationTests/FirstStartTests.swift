import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// A first start on an empty database, as under `docker compose up`: the services that poll
/// tables (webhook sender, spike detector) start beside the migration and wait for it, so the
/// log has no warning about tables that do not exist yet.
@Suite struct FirstStartTests {
    @Test func firstStartOnAnEmptyDatabaseLogsNoWarning() async throws {
        try await withPrivateDatabase("crashguard_first") { base in
            var config = base
            // Both polling services on, as in a real server (the test default turns them off).
            config.webhooks.concurrency = 2
            config.webhooks.pollInterval = .seconds(0.05)
            config.webhooks.spikeInterval = .seconds(0.1)
            let sink = ReliabilityLogSink()
            var logger = Logger(label: "first-start") { _ in ReliabilityCapturingHandler(sink: sink) }
            logger.logLevel = .info
            do {
                let app = try await buildApplication(configuration: config, logger: logger)
                try await app.test(.live) { client in
                    #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
                    // A webhook poll and a spike pass run after the schema is in place.
                    try await Task.sleep(for: .milliseconds(1500))
                }
            } catch {
                Issue.record("\(String(reflecting: error))")
            }
            let problems = sink.lines.filter { ["warning", "error", "critical"].contains(String($0.prefix { $0 != " " })) }
            #expect(problems.isEmpty, "\(problems)")
            #expect(sink.lines.contains { $0.contains("schema applied") })
        }
    }

    /// The database password never reaches the log, at debug level either: the service group
    /// logs each service it starts, and a bare `PostgresClient` prints its configuration.
    @Test func theDebugLogHoldsNoDatabasePassword() async throws {
        var url = try #require(URLComponents(string: TestEnvironment.databaseURL))
        let password = "pw-canary-" + UUID().uuidString.prefix(8)
        url.password = password  // the test cluster trusts loopback: any password connects
        let config = TestEnvironment.configuration { $0.databaseURL = url.string! }
        let sink = ReliabilityLogSink()
        var logger = Logger(label: "debug-start") { _ in ReliabilityCapturingHandler(sink: sink) }
        logger.logLevel = .trace
        let app = try await buildApplication(configuration: config, logger: logger)
        try await app.test(.live) { client in
            let ready = try await client.execute(uri: "/readyz", method: .get)
            #expect(ready.status == .ok)
        }
        #expect(sink.lines.contains { $0.contains("PostgresClient(ingest)") })  // the services were logged
        let leaks = sink.lines.filter { $0.contains(password) }
        #expect(leaks.count == 0, "\(leaks.first?.prefix(300) ?? "")")
    }
}
