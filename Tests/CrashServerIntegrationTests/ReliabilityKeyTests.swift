import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Keys: stored only as SHA-256, never logged, looked up by hash, rotated at once, and
/// the two kinds never cross.
@Suite struct ReliabilityKeyTests {
    @Test func keysAreStoredOnlyAsSHA256() async throws {
        let project = try await makeProject()
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let rows = try await db.client.query(
                "SELECT ingest_key_hash, read_token_hash, row_to_json(p)::text FROM projects p WHERE slug = \(project.project)",
                logger: db.logger)
            var found = 0
            for try await (ingest, read, row) in rows.decode((Data, Data, String).self) {
                found += 1
                #expect(ingest == ProjectKeys.hash(project.ingestKey) && ingest.count == 32)
                #expect(read == ProjectKeys.hash(project.readToken) && read.count == 32)
                #expect(!row.contains(project.ingestKey) && !row.contains(project.readToken))
                let secret = String(project.readToken.dropFirst(4))
                #expect(!row.contains(secret))
            }
            #expect(found == 1)
        }
        // The hash is SHA-256 (FIPS 180-2 test vector).
        #expect(
            ProjectKeys.hash("abc").map { String(format: "%02x", $0) }.joined()
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // 256 random bits each, base64url: 43 characters after the prefix.
        #expect(project.ingestKey.hasPrefix("cgi_") && project.ingestKey.count == 47)
        #expect(project.readToken.hasPrefix("cgr_") && project.readToken.count == 47)
    }

    @Test func keysAreNeverLogged() async throws {
        let project = try await makeProject()
        let sink = ReliabilityLogSink()
        var logger = Logger(label: "keys") { _ in ReliabilityCapturingHandler(sink: sink) }
        logger.logLevel = .trace
        let app = try await buildApplication(configuration: TestEnvironment.configuration(), logger: logger)
        let bogus = "cgi_" + String(repeating: "z", count: 43)
        try await app.test(.live) { client in
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            #expect(try await client.ingest(key: bogus, body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.ingest(key: project.ingestKey, body: [0xFF], encoding: "identity").status == .badRequest)
            for token in [project.readToken, project.ingestKey, bogus] {
                _ = try await client.execute(
                    uri: "/v1/projects/\(project.project)/crashes", method: .get, headers: [.authorization: "Bearer \(token)"])
            }
        }
        let lines = sink.lines
        #expect(!lines.isEmpty, "trace logging produced lines")
        for secret in [project.ingestKey, project.readToken, bogus, String(project.readToken.dropFirst(4))] {
            #expect(!lines.contains { $0.contains(secret) }, "a key appears in the log")
        }
    }

    @Test func rotationStopsBothOldKeysOnTheNextRequest() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let auth = { (token: String) -> HTTPFields in [.authorization: "Bearer \(token)"] }
            let path = "/v1/projects/\(project.project)/crashes"
            #expect(try await client.execute(uri: path, method: .get, headers: auth(project.readToken)).status == .ok)
            let rotated = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotate(slug: project.project) }
            #expect(try await client.execute(uri: path, method: .get, headers: auth(project.readToken)).status == .unauthorized)
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.execute(uri: path, method: .get, headers: auth(rotated.readToken)).status == .ok)
            #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            // Creating an existing project again keeps its keys.
            await #expect(throws: (any Error).self) {
                _ = try await withTestDatabase { try await PostgresProjectStore(database: $0).create(slug: project.project) }
            }
            #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
        }
    }

    @Test func readTokensCannotIngestAndIngestKeysCannotRead() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let ingestWithToken = try await client.ingest(key: project.readToken, body: batchBody([reportJSON()]))
            #expect(ingestWithToken.status == .unauthorized)
            #expect(ingestWithToken.errorMessage?.isEmpty == false)
            for path in ["crashes", "stats"] {
                let read = try await client.execute(
                    uri: "/v1/projects/\(project.project)/\(path)", method: .get,
                    headers: [.authorization: "Bearer \(project.ingestKey)"])
                #expect(read.status == .unauthorized, "\(path)")
                let viaHeader = try await client.execute(
                    uri: "/v1/projects/\(project.project)/\(path)", method: .get,
                    headers: [HTTPField.Name("X-Crash-Key")!: project.ingestKey])
                #expect(viaHeader.status == .unauthorized, "\(path)")
            }
            let patch = try await client.execute(
                uri: "/v1/projects/\(project.project)/crashes/1", method: .patch,
                headers: [.authorization: "Bearer \(project.ingestKey)", .contentType: "application/json"],
                body: ByteBuffer(string: #"{"status":"ignored"}"#))
            #expect(patch.status == .unauthorized)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).isEmpty)
        }
    }
}

/// Every log line (message and metadata) a test's server wrote.
final class ReliabilityLogSink: Sendable {
    private let storage = Mutex<[String]>([])
    func append(_ line: String) { storage.withLock { $0.append(line) } }
    var lines: [String] { storage.withLock { $0 } }
}

struct ReliabilityCapturingHandler: LogHandler {
    let sink: ReliabilityLogSink
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let extra = event.metadata { all.merge(extra) { $1 } }
        // The error too: a key must not reach the log through an error's description either.
        sink.append("\(event.level) \(event.message) \(all) \(event.source) \(event.error.map { "\($0)" } ?? "")")
    }
}
