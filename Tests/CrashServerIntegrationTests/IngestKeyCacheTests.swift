import CrashGrouping
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The cached ingest-key lookup (issues 13 and 21): a warm key costs no database round trip,
/// and yet a rotation, a grouping switch or a lost listener takes effect on the very next
/// request, on every server sharing the database.
///
/// The tests on real servers each take a database of their own (``withKeysDatabase(_:)``):
/// what they do reaches every server of a database, by design. Any change to `projects` (a
/// project created anywhere) drops every server's cache, so a cache hit counted on a shared
/// database depends on what other tests do meanwhile; `aLostListenerBypassesTheCache` ends
/// the listeners of its database; the silent listener of
/// `aServerThatNeverConfirmsDelaysARotationOnlyBoundedly` holds every change to `projects`
/// of its database for the confirmation timeout.
@Suite(.keysDatabases) struct IngestKeyCacheTests {
    static func owner(_ id: Int64, grouping: GroupingVersion = .v2) -> IngestKeyCache.Owner {
        IngestKeyCache.Owner(project: ProjectRef(id: id, slug: "p\(id)", groupingVersion: grouping), sentryID: id + 100)
    }

    /// A lookup that must be answered by the cache.
    static func unexpectedLoad(_: Data) -> IngestKeyCache.Owner? {
        Issue.record("looked up in the database, expected a cache hit")
        return nil
    }

    // MARK: The cache alone

    @Test func trustedOnlyWhileItsListenerIsInPlace() async throws {
        let cache = IngestKeyCache()
        let owner = Self.owner(1)
        // No listener yet: every lookup goes to the database, nothing is kept.
        #expect(try await cache.owner(of: "cgi_a") { _ in owner } == owner)
        #expect(try await cache.owner(of: "cgi_a") { _ in owner } == owner)
        #expect(cache.statistics == .init(hits: 0, misses: 0, bypasses: 2, entries: 0, listening: false))

        cache.listening(1)
        #expect(try await cache.owner(of: "cgi_a") { _ in owner } == owner)
        #expect(try await cache.owner(of: "cgi_a", load: Self.unexpectedLoad) == owner)
        #expect(cache.statistics == .init(hits: 1, misses: 1, bypasses: 2, entries: 1, listening: true))

        // The loss of an older connection changes nothing; the loss of this one empties it.
        cache.lost(0)
        #expect(try await cache.owner(of: "cgi_a", load: Self.unexpectedLoad) == owner)
        cache.lost(1)
        #expect(cache.statistics.entries == 0)
        #expect(try await cache.owner(of: "cgi_a") { _ in nil } == nil)
        #expect(cache.statistics.bypasses == 3)
    }

    @Test func aNotificationDropsEveryEntry() async throws {
        let cache = IngestKeyCache()
        cache.listening(1)
        _ = try await cache.owner(of: "cgi_a") { _ in Self.owner(1) }
        _ = try await cache.owner(of: "cgi_b") { _ in Self.owner(2) }
        #expect(cache.statistics.entries == 2)
        cache.invalidate()
        #expect(cache.statistics.entries == 0)
        let switched = Self.owner(1, grouping: .v1)
        #expect(try await cache.owner(of: "cgi_a") { _ in switched } == switched)
    }

    /// A database answer read before a rotation committed must not land in the cache after
    /// the rotation's notification dropped it.
    @Test func anAnswerOlderThanAnInvalidationIsNotKept() async throws {
        let cache = IngestKeyCache()
        cache.listening(1)
        let stale = try await cache.owner(of: "cgi_a") { _ in
            cache.invalidate()  // the notification arrives while the lookup is under way
            return Self.owner(1)
        }
        #expect(stale == Self.owner(1))
        #expect(cache.statistics.entries == 0)
        // Nor one that began before the listener was lost and found again.
        _ = try await cache.owner(of: "cgi_a") { _ in
            cache.lost(1)
            cache.listening(2)
            return Self.owner(1)
        }
        #expect(cache.statistics.entries == 0)
    }

    @Test func unknownKeysAreNotKeptEntriesExpireAndTheSizeIsBounded() async throws {
        let cache = IngestKeyCache(ttl: .seconds(30), capacity: 2)
        cache.listening(1)
        let start = ContinuousClock.now
        #expect(try await cache.owner(of: "cgi_unknown", now: start) { _ in nil } == nil)
        #expect(cache.statistics.entries == 0)
        _ = try await cache.owner(of: "cgi_a", now: start) { _ in Self.owner(1) }
        #expect(try await cache.owner(of: "cgi_a", now: start + .seconds(29), load: Self.unexpectedLoad) == Self.owner(1))
        let renewed = Self.owner(1, grouping: .v1)
        #expect(try await cache.owner(of: "cgi_a", now: start + .seconds(31)) { _ in renewed } == renewed)
        for key in ["cgi_b", "cgi_c", "cgi_d"] {
            _ = try await cache.owner(of: key, now: start) { _ in Self.owner(2) }
        }
        #expect(cache.statistics.entries == 2)
    }

    // MARK: Real servers on the test database

    /// Two servers on one database, both with the key cached: after `PostgresProjectStore.rotate` (what
    /// `crash-server project rotate` runs) the old key fails on the very next request at both
    /// doors of both servers, and the new key works; a project created meanwhile works at once.
    @Test func aRotationReachesEveryServerOnTheNextRequest() async throws {
        try await withKeysDatabase { config in
            let project = try await makeProject(config)
            let first = try await buildApplication(configuration: config, logger: TestEnvironment.logger)
            let second = try await buildApplication(configuration: config, logger: TestEnvironment.logger)
            try await first.test(.live) { one in
                try await second.test(.live) { two in
                    for client in [one, two] {
                        try await waitForKeyListener(client)
                        #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                        #expect(try await client.sentryEvent(project, key: project.ingestKey).status == .ok)
                        #expect(try await keyLookups(client, "hit") >= 1, "the second request took the cached key")
                    }
                    let rotated = try await withTestDatabase(config) {
                        try await PostgresProjectStore(database: $0).rotate(slug: project.project)
                    }
                    for client in [one, two] {
                        let old = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()]))
                        #expect(old.status == .unauthorized)
                        #expect(try await client.sentryEvent(project, key: project.ingestKey).status == .forbidden)
                        #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                        #expect(try await client.sentryEvent(project, key: rotated.ingestKey).status == .ok)
                    }
                    let fresh = try await makeProject(config)
                    for client in [one, two] {
                        #expect(try await client.ingest(key: fresh.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                    }
                }
            }
        }
    }

    /// `project grouping NAME v2` applies to the next report although the key (and with it
    /// the version) was cached.
    @Test func aGroupingSwitchTakesEffectOnTheNextRequest() async throws {
        try await withKeysDatabase { config in
            let slug = "t-" + UUID().uuidString.lowercased().prefix(18).replacingOccurrences(of: "-", with: "")
            let project = try await withTestDatabase(config) {
                try await PostgresProjectStore(database: $0).create(slug: slug, grouping: .v1)
            }
            try await withApp(config) { client in
                try await waitForKeyListener(client)
                for _ in 0..<2 {
                    #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                }
                #expect(try await keyLookups(client, "hit") >= 1)
                _ = try await withTestDatabase(config) {
                    try await PostgresProjectStore(database: $0).setGroupingVersion(slug: slug, to: .v2)
                }
                #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            }
            let versions = try await withTestDatabase(config) { (db: CrashDatabase) async throws -> [String] in
                let rows = try await db.client.query(
                    """
                    SELECT g.grouping_version FROM crash_groups g JOIN projects p ON p.id = g.project_id
                    WHERE p.slug = \(slug) ORDER BY g.id
                    """, logger: TestEnvironment.logger)
                var versions: [String] = []
                for try await version in rows.decode(String.self) { versions.append(version) }
                return versions
            }
            #expect(versions == ["v1", "v2"], "the report after the switch is grouped with v2")
        }
    }

    /// While the listener is not connected the cache is not trusted: its connection is killed
    /// (and kept from coming back) with the key cached, the key is rotated in that gap, and
    /// the old key still fails at once on both doors.
    @Test func aLostListenerBypassesTheCache() async throws {
        try await withKeysDatabase { config in
            let project = try await makeProject(config)
            let database = try CrashDatabase(configuration: config, logger: TestEnvironment.logger)
            let batcher = IngestBatcher(
                maxQueuedReports: 1000, maxBatchReports: 100, maxBatchBytes: 16 << 20, timeout: .seconds(60), metrics: ServerMetrics(),
                logger: TestEnvironment.logger, store: { try await PostgresIngestStore(database: database).store($0, gate: $1) },
                probe: { try await database.ping() })
            let keys = IngestKeyCache()
            let listener = try IngestKeyListener(
                cache: keys, databaseURL: config.databaseURL, retryDelay: .seconds(600), logger: TestEnvironment.logger)
            let router = try buildRouter(
                database: database, batcher: batcher, metrics: ServerMetrics(), configuration: config, timeout: .seconds(60),
                keys: keys, logger: TestEnvironment.logger)
            let app = Application(router: router, services: database.services + [batcher, listener], logger: TestEnvironment.logger)
            try await app.test(.live) { client in
                try await waitForKeyListener(client)
                for _ in 0..<2 {
                    #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                }
                #expect(keys.statistics.hits == 1)
                // The listener of this server, the only one of this test's database.
                let terminated = try await withTestDatabase(config) { (db: CrashDatabase) async throws -> Int in
                    let rows = try await db.client.query(
                        """
                        SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
                        WHERE datname = current_database() AND application_name = \(IngestKeyCache.listenerName)
                        """, logger: TestEnvironment.logger)
                    var terminated = 0
                    for try await done in rows.decode(Bool.self) where done { terminated += 1 }
                    return terminated
                }
                #expect(terminated == 1)
                let rotated = try await withTestDatabase(config) {
                    try await PostgresProjectStore(database: $0).rotate(slug: project.project)
                }
                #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .unauthorized)
                #expect(try await client.sentryEvent(project, key: project.ingestKey).status == .forbidden)
                #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
                let statistics = keys.statistics
                #expect(!statistics.listening)
                #expect(statistics.hits == 1 && statistics.entries == 0)
                #expect(statistics.bypasses == 4)
            }
        }
    }

    /// A server that is counted as listening but never confirms (hung) delays `project
    /// rotate` by the bounded wait, and the rotation stands.
    @Test func aServerThatNeverConfirmsDelaysARotationOnlyBoundedly() async throws {
        try await withKeysDatabase { config in
            let project = try await makeProject(config)
            var configuration = try PostgresConnection.Configuration(url: config.databaseURL)
            configuration.options.additionalStartupParameters = [("application_name", IngestKeyCache.listenerName)]
            let silent = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: TestEnvironment.logger)
            let timeout = Duration.milliseconds(500)
            let started = ContinuousClock.now
            let rotated = try await withTestDatabase(config) {
                var store = PostgresProjectStore(database: $0)
                store.keyCacheConfirmationTimeout = timeout
                return try await store.rotate(slug: project.project)
            }
            let waited = ContinuousClock.now - started
            try await silent.close()
            #expect(waited >= timeout)
            #expect(waited < timeout + .seconds(30))
            try await withTestDatabase(config) { (db: CrashDatabase) async throws in
                let store = PostgresProjectStore(database: db)
                #expect(try await store.owner(ingestKeyHash: ProjectKeys.hash(project.ingestKey)) == nil)
                #expect(try await store.owner(ingestKeyHash: ProjectKeys.hash(rotated.ingestKey))?.project.slug == project.project)
            }
        }
    }
}

/// The trait that gives ``IngestKeyCacheTests``' real-server tests a database each.
extension Trait where Self == KeysDatabases {
    static var keysDatabases: Self { Self() }
}

/// While the suite runs, a template database of the test cluster, made and migrated at the
/// first ``withKeysDatabase(_:)`` and dropped at the end: copying it
/// (`CREATE DATABASE ... TEMPLATE`) takes a fraction of applying schema.sql to each database.
struct KeysDatabases: SuiteTrait, TestScoping {
    @TaskLocal static var template: Template?

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let template = Template()
        var failure: (any Error)?
        do { try await Self.$template.withValue(template) { try await function() } } catch { failure = error }
        try await template.drop()
        if let failure { throw failure }
    }

    /// The suite's template: made once, however many tests ask at once.
    actor Template {
        private var made: Task<String, any Error>?

        func name() async throws -> String {
            if let made { return try await made.value }
            let making = Task {
                let name = try await TestEnvironment.makeDatabase("keys_template")
                try await withTestDatabase(TestEnvironment.configuration(database: name)) { _ in }
                return name
            }
            made = making
            return try await making.value
        }

        func drop() async throws {
            guard let made, let name = try? await made.value else { return }
            try await TestEnvironment.dropDatabase(name)
        }
    }
}

/// Runs `body` with the configuration of a database of its own, a copy of the suite's migrated
/// template (``KeysDatabases``), dropped afterwards.
func withKeysDatabase(_ body: (ServerConfiguration) async throws -> Void) async throws {
    guard let template = KeysDatabases.template else {
        Issue.record("withKeysDatabase needs its suite's .keysDatabases trait")
        return
    }
    try await withPrivateDatabase("keys", template: try await template.name(), body)
}

/// Waits (at most 60 s) until the server's ingest-key listener is in place, so the requests
/// that follow are answered from the cache.
func waitForKeyListener(_ client: any TestClientProtocol) async throws {
    try await waitUntil("the ingest-key listener starts", within: .seconds(60)) {
        try await metricValue(client, "crashguard_ingest_key_cache_listening") == 1
    }
}

/// `crashguard_ingest_key_lookups_total{result="<result>"}` of the server.
func keyLookups(_ client: any TestClientProtocol, _ result: String) async throws -> Double {
    try await metricValue(client, #"crashguard_ingest_key_lookups_total{result="\#(result)"}"#) ?? 0
}

/// The value of the `/metrics` line that starts with `series` and a space.
func metricValue(_ client: any TestClientProtocol, _ series: String) async throws -> Double? {
    let text = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
    return text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
}

extension TestClientProtocol {
    /// One Sentry event into `project`'s envelope route, authenticated with `key`.
    func sentryEvent(_ project: ProjectCredentials, key: String) async throws -> TestResponse {
        try await sentry(
            "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(key),
            body: SentryIngestTests.eventEnvelope(SentryIngestTests.event()))
    }
}
