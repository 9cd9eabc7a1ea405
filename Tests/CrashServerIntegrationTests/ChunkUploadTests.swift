import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Sentry's chunk-upload protocol as sentry-cli speaks it (apple.md): options, chunks
/// checked by SHA-1, assemble's states, and its refusals. scripts/test.d/22-sentry-cli runs
/// the real sentry-cli against it.
@Suite(.serialized) struct ChunkUploadTests {
    static func sha1(_ bytes: [UInt8]) -> String { Insecure.SHA1.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    func json(_ response: TestResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
    }

    func chunk(_ client: some TestClientProtocol, _ token: String, _ bytes: [UInt8], name: String) async throws -> TestResponse {
        var body = Array("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(name)\"\r\n".utf8)
        body += Array("Content-Type: application/octet-stream\r\n\r\n".utf8) + bytes + Array("\r\n--XyZ--\r\n".utf8)
        return try await client.execute(
            uri: "/api/0/organizations/any/chunk-upload/", method: .post,
            headers: [.authorization: "Bearer \(token)", .contentType: "multipart/form-data; boundary=XyZ"],
            body: ByteBuffer(bytes: body))
    }

    func assemble(
        _ client: some TestClientProtocol, _ project: ProjectCredentials, _ files: [String: [String: Any]], slug: String? = nil
    )
        async throws -> TestResponse
    {
        try await client.execute(
            uri: "/api/0/projects/any/\(slug ?? project.project)/files/difs/assemble/", method: .post,
            headers: [.authorization: "Bearer \(project.readToken)", .contentType: "application/json"],
            body: ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: files)))
    }

    @Test func chunksThenAssembleThenKnown() async throws {
        let project = try await makeProject()
        let file = Array(try Data(contentsOf: TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/debug-files/Crashy-x86_64")))
        let pieces = [Array(file[..<4000]), Array(file[4000...])]
        let sums = pieces.map(Self.sha1)
        let whole = Self.sha1(file)
        try await withApp { client in
            let options = try await client.execute(
                uri: "/api/0/organizations/acme/chunk-upload/", method: .get,
                headers: [.authorization: "Bearer \(project.readToken)"], body: ByteBuffer())
            #expect(options.status == .ok)
            let body = json(options)
            #expect(body["url"] as? String == "/api/0/organizations/acme/chunk-upload/")
            #expect(body["chunkSize"] as? Int == 8_388_608 && body["concurrency"] as? Int == 4)
            #expect(body["hashAlgorithm"] as? String == "sha1" && body["accept"] as? [String] == ["debug_files"])
            let request: [String: [String: Any]] = [whole: ["name": "Crashy", "debug_id": "4c4c449b-5555-3144-a1ad-85aa0dbff185", "chunks": sums]]
            let first = json(try await assemble(client, project, request))[whole] as? [String: Any]
            #expect(first?["state"] as? String == "not_found")
            #expect(first?["missingChunks"] as? [String] == sums)
            // A chunk whose name is not its SHA-1: 400.
            #expect(try await chunk(client, project.readToken, pieces[0], name: sums[1]).status == .badRequest)
            for (piece, sum) in zip(pieces, sums) {
                #expect(try await chunk(client, project.readToken, piece, name: sum).status == .ok)
            }
            let done = json(try await assemble(client, project, request))[whole] as? [String: Any]
            #expect(done?["state"] as? String == "ok")
            let dif = done?["dif"] as? [String: Any]
            #expect(dif?["debugId"] as? String == "4c4c449b-5555-3144-a1ad-85aa0dbff185")
            #expect(dif?["cpuName"] as? String == "x86_64" && dif?["sha1"] as? String == whole)
            // Known now: ok without chunks.
            let again = json(try await assemble(client, project, [whole: ["name": "Crashy", "chunks": sums]]))[whole] as? [String: Any]
            #expect(again?["state"] as? String == "ok")
        }
    }

    @Test func refusals() async throws {
        let project = try await makeProject()
        let other = try await makeProject()
        let junk = Array("not a debug file at all".utf8)
        let sum = Self.sha1(junk)
        try await withApp { client in
            #expect(try await chunk(client, project.readToken, junk, name: sum).status == .ok)
            let state = json(try await assemble(client, project, [sum: ["name": "junk", "chunks": [sum]]]))[sum] as? [String: Any]
            #expect(state?["state"] as? String == "error")
            #expect((state?["detail"] as? String)?.contains("not a Mach-O") == true)
            // Chunks concatenated to another SHA-1 than the key: error.
            let wrong = String(repeating: "a", count: 40)
            let mismatch = json(try await assemble(client, project, [wrong: ["name": "x", "chunks": [sum]]]))[wrong] as? [String: Any]
            #expect(mismatch?["state"] as? String == "error")
            // Another project's slug: 404; no token: 401; another project's chunks are not this one's.
            #expect(try await assemble(client, project, [:], slug: other.project).status == .notFound)
            let anonymous = try await client.execute(uri: "/api/0/organizations/x/chunk-upload/", method: .get, headers: [:], body: ByteBuffer())
            #expect(anonymous.status == .unauthorized)
            let theirs = try await client.execute(
                uri: "/api/0/projects/any/\(other.project)/files/difs/assemble/", method: .post,
                headers: [.authorization: "Bearer \(other.readToken)"],
                body: ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: [sum: ["name": "junk", "chunks": [sum]]])))
            #expect((json(theirs)[sum] as? [String: Any])?["state"] as? String == "not_found")
        }
    }

    /// Chunks no assemble took are swept by the periodic maintenance once past their keep,
    /// whether or not their project uploads again; younger ones stay.
    @Test func maintenanceSweepsExpiredChunks() async throws {
        let project = try await makeProject()
        let old: [UInt8] = Array("an abandoned chunk \(UUID())".utf8)
        let fresh: [UInt8] = Array("a recent chunk \(UUID())".utf8)
        try await withTestDatabase { database in
            var id: Int64 = 0
            for try await value in try await database.client.query(
                "SELECT id FROM projects WHERE slug = \(project.project)", logger: database.logger
            ).decode(Int64.self) { id = value }
            let store = PostgresChunkUploadStore(database: database)
            try await store.save(project: id, chunks: [(Self.sha1(old), ByteBuffer(bytes: old))], maxBytes: 1 << 20)
            try await database.client.query(
                """
                UPDATE upload_chunks SET uploaded_at = now() - interval '3 hours'
                WHERE project_id = \(id) AND sha1 = \(Self.sha1(old))
                """, logger: database.logger)
            try await store.save(project: id, chunks: [(Self.sha1(fresh), ByteBuffer(bytes: fresh))], maxBytes: 1 << 20)
            let maintenance = PartitionMaintenance(
                schema: PostgresSchemaMaintenance(database: database), database: database,
                retentionDays: TestEnvironment.configuration().retentionDays, logger: database.logger)
            try await maintenance.runOnce()
            #expect(try await store.missing(project: id, among: [Self.sha1(old), Self.sha1(fresh)]) == [Self.sha1(old)])
        }
    }
}
