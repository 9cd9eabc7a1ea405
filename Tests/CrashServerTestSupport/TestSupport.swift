import CodecTestSupport
import CrashCompression
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer

/// Settings of the real PostgreSQL the test command starts (`scripts/test`).
enum TestEnvironment {
    /// `CRASHGUARD_TEST_DATABASE_URL`, else the test database of `scripts/postgres`.
    static let databaseURL =
        ProcessInfo.processInfo.environment["CRASHGUARD_TEST_DATABASE_URL"]
        ?? "postgres://crashguard@127.0.0.1:54329/crashguard_test?sslmode=disable"

    /// Quiet unless `CRASHGUARD_TEST_LOG_LEVEL` says otherwise.
    static var logger: Logger {
        var logger = Logger(label: "crashguard.test")
        logger.logLevel = ProcessInfo.processInfo.environment["CRASHGUARD_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .error
        return logger
    }

    /// The repository root (for scripts/ and the built binaries).
    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A server configuration on the test database: free port, no rate limit, small pool.
    static func configuration(_ edit: (inout ServerConfiguration) -> Void = { _ in }) -> ServerConfiguration {
        var config = ServerConfiguration()
        config.databaseURL = databaseURL
        config.port = 0
        config.rateLimit = 0
        config.databasePoolSize = 4
        // A starved CI machine must not turn slow commits into 503s in tests that expect 202.
        config.databaseTimeout = .seconds(60)
        // Webhook delivery and spike detection only where a test turns them on (WebhookTests),
        // so apps of other tests never take that test's deliveries with their own timings.
        config.webhooks.concurrency = 0
        config.webhooks.spikeInterval = .seconds(0)
        config.webhooks.alertInterval = .seconds(0)
        // Retention sweeps only where a test runs one (RetentionTests), so no app of another
        // test removes that test's old reports.
        config.retentionSweepInterval = .seconds(0)
        edit(&config)
        return config
    }
}

/// Runs `body` with the test database (schema applied, the partitions of the days around today made).
@discardableResult
func withTestDatabase<T: Sendable>(
    _ config: ServerConfiguration = TestEnvironment.configuration(), _ body: @Sendable (CrashDatabase) async throws -> T
) async throws -> T {
    try await withDatabase(config, logger: TestEnvironment.logger) { db in
        let schema = PostgresSchemaMaintenance(database: db)
        try await schema.migrate()
        // As a server does before it takes traffic: reports stored here go to their day's
        // partition, not to the default one, which would then refuse that day's partition
        // when a server starts on this database.
        let (first, last) = PartitionMaintenance.partitionedDays(around: Date())
        _ = try await schema.maintainPartitions(from: first, to: last, dropBefore: Date(timeIntervalSince1970: 0))
        return try await body(db)
    }
}

/// Runs `body` with the configuration of a private database of the test cluster
/// (`<prefix>_<8 hex digits>`), dropped afterwards: for tests that change the schema or need
/// a first start, which would disturb tests running beside them on the shared database. Empty,
/// or a copy of database `template` (`CREATE DATABASE ... TEMPLATE`, a fraction of the time
/// applying schema.sql takes).
func withPrivateDatabase(
    _ prefix: String, template: String? = nil, _ body: (ServerConfiguration) async throws -> Void
) async throws {
    let name = try await TestEnvironment.makeDatabase(prefix, template: template)
    var failure: (any Error)?
    do { try await body(TestEnvironment.configuration(database: name)) } catch { failure = error }
    try await TestEnvironment.dropDatabase(name)
    if let failure { throw failure }
}

extension TestEnvironment {
    /// A test configuration on database `name` of the test cluster.
    static func configuration(database name: String) -> ServerConfiguration {
        var url = URLComponents(string: databaseURL)!
        url.path = "/" + name
        return configuration { $0.databaseURL = url.string! }
    }

    /// `sql`, a statement that must run outside a transaction (`CREATE DATABASE`), on the
    /// shared test database.
    static func execute(_ sql: String) async throws {
        try await withTestDatabase { db in
            _ = try await db.client.query(PostgresQuery(unsafeSQL: sql), logger: logger)
        }
    }

    /// Makes database `<prefix>_<8 hex digits>` of the test cluster, empty or a copy of
    /// `template`; returns its name.
    static func makeDatabase(_ prefix: String, template: String? = nil) async throws -> String {
        let name = prefix + "_" + uniqueSuffix()
        try await execute("CREATE DATABASE \(name)" + (template.map { " TEMPLATE \($0)" } ?? ""))
        return name
    }

    /// Drops database `name` of the test cluster, ending its sessions.
    static func dropDatabase(_ name: String) async throws {
        try await execute("DROP DATABASE \(name) WITH (FORCE)")
    }

    /// 8 hex digits, for a name no other test uses.
    static func uniqueSuffix() -> String {
        String(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(8))
    }
}

/// What a test's own machinery (a process it runs, a socket, a wait) failed with.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Polls `condition` every `interval` until it holds. Past `limit` without it, fails with
/// `what`: a test whose premise never comes (a lock wait it missed, a state never reached)
/// fails naming it instead of holding its lane until the run's watchdog stops it.
func waitUntil(
    _ what: @autoclosure () -> String, within limit: Duration = .seconds(30), every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + limit
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("not within \(limit): \(what())") }
        try await Task.sleep(for: interval)
    }
}

/// A fresh project with a unique slug, so tests running in parallel never share data.
func makeProject(_ config: ServerConfiguration = TestEnvironment.configuration()) async throws -> ProjectCredentials {
    let slug = "t-" + UUID().uuidString.lowercased().prefix(18).replacingOccurrences(of: "-", with: "")
    return try await withTestDatabase(config) { try await PostgresProjectStore(database: $0).create(slug: slug) }
}

/// Runs `body` against the full application (real database, real batcher) in router mode.
func withApp(
    _ config: ServerConfiguration = TestEnvironment.configuration(),
    _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
) async throws {
    let app = try await buildApplication(configuration: config, logger: TestEnvironment.logger)
    try await app.test(.router) { client in try await body(client) }
}

/// A report as a JSON object, valid unless edited.
func reportJSON(
    id: UUID = UUID(),
    timestamp: Date = Date(),
    kind: String = "container",
    reason: String = "-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]",
    version: String = "1.0.0",
    extra: [String: Any] = [:]
) -> [String: Any] {
    var report: [String: Any] = [
        "id": id.uuidString.lowercased(),
        "timestamp": RFC3339.format(timestamp),
        "kind": kind,
        "reason": reason,
        "app": ["id": "com.example.demo", "version": version],
        "device": ["os": "iOS", "osVersion": "17.1", "model": "iPhone14,2", "id": "device-1"],
    ]
    for (key, value) in extra { report[key] = value }
    return report
}

/// `{"reports": [...]}` as bytes.
func batchBody(_ reports: [Any]) -> [UInt8] {
    Array(try! JSONSerialization.data(withJSONObject: ["reports": reports]))
}

/// gzip of `bytes`.
func gzip(_ bytes: [UInt8]) -> [UInt8] {
    try! Deflater.compress(bytes, format: .gzip)
}

extension TestClientProtocol {
    /// `POST /v1/reports` with the given key, body and encoding.
    func ingest(
        key: String?, body: [UInt8], encoding: String? = "gzip", contentType: String? = "application/json",
        headers extra: HTTPFields = [:]
    ) async throws -> TestResponse {
        try await postIngest("/v1/reports", key: key, body: body, encoding: encoding, contentType: contentType, headers: extra)
    }

    /// A body sent to the ingest door `uri` with the ingest key, encoded as `encoding` says.
    func postIngest(
        _ uri: String, key: String?, body: [UInt8], encoding: String?, contentType: String?, headers extra: HTTPFields = [:]
    ) async throws -> TestResponse {
        var headers = extra
        if let key { headers[HTTPField.Name("X-Crash-Key")!] = key }
        if let contentType { headers[.contentType] = contentType }
        if let encoding { headers[.contentEncoding] = encoding }
        let payload: [UInt8]
        switch encoding?.lowercased() {
        case "gzip": payload = gzip(body)
        case "deflate": payload = try Deflater.compress(body, format: .deflate)
        case "br": payload = try TestEncoders.brotli(body)
        case "zstd": payload = try TestEncoders.zstd(body)
        default: payload = body
        }
        return try await execute(uri: uri, method: .post, headers: headers, body: ByteBuffer(bytes: payload))
    }
}

extension TestResponse {
    /// The body decoded as `T`.
    func decode<T: Decodable>(_: T.Type = T.self) throws -> T {
        try JSONDecoder.crashWire().decode(T.self, from: Data(body.readableBytesView))
    }

    /// The `error` of a `{"error": "..."}` body.
    var errorMessage: String? { (try? decode(ErrorBody.self))?.error }
}

extension CrashDatabase {
    /// Ids of every report stored for the project.
    func storedReportIDs(slug: String) async throws -> [UUID] {
        let rows = try await client.query(
            "SELECT r.id FROM reports r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(slug) ORDER BY r.id",
            logger: logger)
        var ids: [UUID] = []
        for try await id in rows.decode(UUID.self) { ids.append(id) }
        return ids
    }

    /// `(signature, report_count, title)` of every group of the project, biggest first.
    func groups(slug: String) async throws -> [(signature: String, count: Int64, title: String)] {
        let rows = try await client.query(
            """
            SELECT g.signature, g.report_count, g.title FROM crash_groups g JOIN projects p ON p.id = g.project_id
            WHERE p.slug = \(slug) ORDER BY g.report_count DESC, g.id
            """, logger: logger)
        var out: [(String, Int64, String)] = []
        for try await row in rows.decode((String, Int64, String).self) { out.append(row) }
        return out
    }

    /// Sum of the hourly rollup counts of the project, once the reports stored before the call
    /// are folded into the rollups (``aggregateRollups()``).
    func rollupTotal(slug: String) async throws -> Int64 {
        try await aggregateRollups()
        let rows = try await client.query(
            "SELECT COALESCE(SUM(h.count), 0)::bigint FROM group_hourly h JOIN projects p ON p.id = h.project_id WHERE p.slug = \(slug)",
            logger: logger)
        for try await n in rows.decode(Int64.self) { return n }
        return 0
    }
}

extension CrashDatabase {
    /// Folds every pending rollup fact into the rollups, as the server's aggregator does within
    /// `CRASHGUARD_ROLLUP_INTERVAL` and as every query waits for: tests that read the rollup
    /// tables themselves call it first.
    func aggregateRollups() async throws {
        try await rollupFreshness.awaitFolded(project: nil)
    }
}

/// The report the recorded Sentry Cocoa event (Tests/Fixtures/sentry/cocoa-converted-event.json)
/// maps to, by the mapping and by the envelope door alike: a fatal mach exception whose
/// `<redacted>` frames take Apple's image + offset form from debug_meta's Mach-O images (apple.md).
func expectRecordedCocoaReport(_ report: Report, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(report.reason == "EXC_BAD_ACCESS: doCrash > DRHT > objectAtIndex:", sourceLocation: sourceLocation)
    #expect(
        report.stack == [
            "0 CrashLibiOS 0x1001be378 0x1001b8000 + 25464", "1 CrashProbeiOS 0x100091a20 0x100088000 + 39456",
            "2 CrashProbeiOS 0x10008f98c 0x100088000 + 31116",
        ], sourceLocation: sourceLocation)
    #expect(report.context?["image.1"] == "0x100088000 65536 2c656702-aa16-3e5f-94d9-d4430da53398 CrashProbeiOS", sourceLocation: sourceLocation)
    #expect(report.fatal == true, sourceLocation: sourceLocation)
}
