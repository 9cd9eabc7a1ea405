import CrashCompression
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Hostile input against the real server and database: every case gets the contract's
/// status and a body naming the problem, stores nothing it should not, and the server
/// keeps answering other clients meanwhile.
@Suite struct HostileInputTests {
    private static let keyHeader = HTTPField.Name("X-Crash-Key")!

    private func raw(
        _ client: any TestClientProtocol, key: String, body: [UInt8], encoding: String?
    ) async throws -> TestResponse {
        var headers: HTTPFields = [.contentType: "application/json", Self.keyHeader: key]
        if let encoding { headers[.contentEncoding] = encoding }
        return try await client.execute(uri: "/v1/reports", method: .post, headers: headers, body: ByteBuffer(bytes: body))
    }

    /// A normal client still gets its 202.
    private func expectServing(_ client: any TestClientProtocol, key: String) async throws {
        let response = try await client.ingest(key: key, body: batchBody([reportJSON()]))
        #expect(response.status == .accepted)
    }

    @Test func brokenCompressionIs400NamingIt() async throws {
        let project = try await makeProject()
        let valid = gzip(batchBody([reportJSON()]))
        let deflated = try Deflater.compress(batchBody([reportJSON()]), format: .deflate)
        let cases: [(String, [UInt8], String)] = [
            ("truncated gzip", Array(valid.dropLast(12)), "gzip"),
            ("gzip cut after header", Array(valid.prefix(10)), "gzip"),
            ("corrupt gzip", Array(valid.prefix(10)) + [UInt8](repeating: 0xAB, count: 40), "gzip"),
            ("gzip with bad crc", Array(valid.dropLast(8)) + [0, 0, 0, 0] + Array(valid.suffix(4)), "gzip"),
            ("truncated deflate", Array(deflated.dropLast(6)), "deflate"),
            ("gzip sent as deflate", valid, "deflate"),
            ("plain text as gzip", Array("{\"reports\": []}".utf8), "gzip"),
            ("gzip trailing garbage", valid + [0x00, 0x01, 0x02, 0x03], "gzip"),
        ]
        try await withApp { client in
            for (name, body, encoding) in cases {
                let response = try await raw(client, key: project.ingestKey, body: body, encoding: encoding)
                #expect(response.status == .badRequest, "\(name)")
                #expect(response.errorMessage?.contains("not JSON") == true, "\(name): \(response.errorMessage ?? "-")")
            }
            // Invalid UTF-8, plain and inside gzip.
            for (name, body, encoding) in [
                ("identity invalid utf8", [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D] as [UInt8], "identity"),
                ("gzip of invalid utf8", gzip([0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D]), "gzip"),
                ("gzip of lone surrogate", gzip(Array(#"{"reports":[{"reason":""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}]}"#.utf8)), "gzip"),
            ] {
                let response = try await raw(client, key: project.ingestKey, body: body, encoding: encoding)
                #expect(response.status == .badRequest, "\(name)")
                #expect(response.errorMessage?.contains("UTF-8") == true, "\(name): \(response.errorMessage ?? "-")")
            }
            try await expectServing(client, key: project.ingestKey)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1)
        }
    }

    /// 10 GB of zeros in gzip members: 413 at the compressed limit by default; with the
    /// compressed limit raised to 16 MiB, inflation stops at the 16 MiB output cap. Either
    /// way in well under a second per request and without memory growing with the bomb.
    @Test func tenGigabyteZipBombIs413QuicklyWithBoundedMemory() async throws {
        let project = try await makeProject()
        let member = try Deflater.compress([UInt8](repeating: 0, count: 16 << 20), format: .gzip, level: 9)
        let members = 640  // 640 x 16 MiB = 10 GiB inflated
        let bomb = Array([[UInt8]](repeating: member, count: members).joined())
        // Nested: gzip of a gzip bomb; the server inflates one layer, then finds no JSON.
        let nested = try Deflater.compress(Array(bomb.prefix(4 << 20)), format: .gzip, level: 9)
        let rssBefore = hostileResidentBytes()
        // Half the body budget holds one largest request (16 + 16 MiB).
        let raised = TestEnvironment.configuration {
            $0.maxBodyBytes = 16 << 20
            $0.maxInflightBodyBytes = 64 << 20
        }
        try await withApp(raised) { client in
            let started = ContinuousClock.now
            let response = try await raw(client, key: project.ingestKey, body: bomb, encoding: "gzip")
            let elapsed = ContinuousClock.now - started
            #expect(response.status == .contentTooLarge)
            #expect(response.errorMessage?.contains("decompressed") == true)
            #expect(elapsed < .seconds(5), "took \(elapsed)")
            let inner = try await raw(client, key: project.ingestKey, body: nested, encoding: "gzip")
            #expect(inner.status == .badRequest || inner.status == .contentTooLarge)
            #expect(inner.errorMessage?.isEmpty == false)
            try await expectServing(client, key: project.ingestKey)
        }
        try await withApp { client in
            let started = ContinuousClock.now
            let response = try await raw(client, key: project.ingestKey, body: bomb, encoding: "gzip")
            #expect(response.status == .contentTooLarge)
            #expect(response.errorMessage?.contains("limit") == true)
            #expect(ContinuousClock.now - started < .seconds(5))
        }
        let growth = hostileResidentBytes() - rssBefore
        // The bomb itself (~10 MiB) and the capped 16 MiB output, never gigabytes.
        #expect(growth < 512 << 20, "RSS grew by \(growth >> 20) MiB")
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1)
        }
    }

    @Test func deeplyNestedJSONIsRefusedWithoutCrashing() async throws {
        let project = try await makeProject()
        let depth = 100_000
        let nestedBody =
            Array(#"{"reports":"#.utf8) + [UInt8](repeating: UInt8(ascii: "["), count: depth)
            + [UInt8](repeating: UInt8(ascii: "]"), count: depth) + Array("}".utf8)
        let nestedObjects =
            Array(String(repeating: #"{"a":"#, count: depth).utf8) + Array("1".utf8)
            + [UInt8](repeating: UInt8(ascii: "}"), count: depth)
        // Inside one report's context: the whole body is still not acceptable JSON.
        let inReport =
            Array(#"{"reports":[{"context":"#.utf8) + [UInt8](repeating: UInt8(ascii: "["), count: depth)
            + [UInt8](repeating: UInt8(ascii: "]"), count: depth) + Array("}]}".utf8)
        try await withApp { client in
            for (name, body) in [("nested arrays", nestedBody), ("nested objects", nestedObjects), ("in a report", inReport)] {
                let response = try await client.ingest(key: project.ingestKey, body: body)
                #expect(response.status == .badRequest, "\(name)")
                #expect(response.errorMessage?.isEmpty == false, "\(name)")
            }
            // Nested within the contract's 32 levels (the top-level object, `reports` and the
            // report make 3) inside a field: a rejected report. One level more: 400.
            let moderate = String(repeating: "[", count: 29) + String(repeating: "]", count: 29)
            let body = Array(#"{"reports":[{"context":"#.utf8) + Array(moderate.utf8) + Array("}]}".utf8)
            let response = try await client.ingest(key: project.ingestKey, body: body)
            #expect(response.status == .accepted)
            let parsed = try response.decode(IngestResponse.self)
            #expect(parsed.rejected.count == 1)
            let deeper = Array(#"{"reports":[{"context":["#.utf8) + Array(moderate.utf8) + Array("]}]}".utf8)
            let refused = try await client.ingest(key: project.ingestKey, body: deeper)
            #expect(refused.status == .badRequest)
            #expect(refused.errorMessage?.contains("deeper than 32") == true)
            try await expectServing(client, key: project.ingestKey)
        }
    }

    @Test func hundredThousandElementArrays() async throws {
        let project = try await makeProject()
        let manyReports = batchBody(Array(repeating: [String: Any](), count: 100_000))
        let manyFrames = batchBody([reportJSON(extra: ["stack": Array(repeating: "f", count: 100_000)])])
        let manyContext = batchBody([
            reportJSON(extra: ["context": Dictionary(uniqueKeysWithValues: (0..<100_000).map { ("k\($0)", "v") })])
        ])
        let manyParts = batchBody([reportJSON(extra: ["fingerprint": Array(repeating: "p", count: 100_000)])])
        try await withApp { client in
            let reports = try await client.ingest(key: project.ingestKey, body: manyReports)
            #expect(reports.status == .badRequest)
            // Refused at the 1001st element (the contract), without counting the rest.
            #expect(reports.errorMessage?.contains("more than 1000 reports") == true)
            for (name, body, field) in [
                ("frames", manyFrames, "stack:"), ("context", manyContext, "context:"), ("fingerprint", manyParts, "fingerprint:"),
            ] {
                let started = ContinuousClock.now
                let response = try await client.ingest(key: project.ingestKey, body: body)
                #expect(response.status == .accepted, "\(name)")
                let parsed = try response.decode(IngestResponse.self)
                #expect(parsed.accepted == 0 && parsed.rejected.count == 1, "\(name)")
                #expect(parsed.rejected.first?.error.hasPrefix(field) == true, "\(name): \(parsed.rejected.first?.error ?? "-")")
                #expect(ContinuousClock.now - started < .seconds(5), "\(name)")
            }
            try await expectServing(client, key: project.ingestKey)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1)
        }
    }

    @Test func hugeNumbersAreRejectedNamingTheField() async throws {
        let project = try await makeProject()
        let digits = String(repeating: "9", count: 100_000)
        func report(_ field: String, _ literal: String) -> String {
            let base = reportJSON()
            var object = base
            object.removeValue(forKey: field)
            let json = String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
            return String(json.dropLast()) + ",\"\(field)\":\(literal)}"
        }
        let cases: [(String, String, String)] = [
            ("id", "1e999999999", "id:"),
            ("timestamp", digits, "timestamp:"),
            ("fatal", "-" + digits + ".5e-99999", "fatal:"),
            ("reason", "1.7976931348623157e309", "reason:"),
            ("kind", "0." + digits, "kind:"),
        ]
        let body = Array(("{\"reports\":[" + cases.map { report($0.0, $0.1) }.joined(separator: ",") + "]}").utf8)
        try await withApp { client in
            let response = try await client.ingest(key: project.ingestKey, body: body)
            #expect(response.status == .accepted)
            let parsed = try response.decode(IngestResponse.self)
            #expect(parsed.accepted == 0)
            let errors = Dictionary(uniqueKeysWithValues: parsed.rejected.map { ($0.index, $0.error) })
            for (index, (_, _, prefix)) in cases.enumerated() {
                #expect(errors[index]?.hasPrefix(prefix) == true, "\(prefix) \(errors[index] ?? "-")")
            }
            // A bare huge number as the whole body.
            let bare = try await client.ingest(key: project.ingestKey, body: Array(digits.utf8))
            #expect(bare.status == .badRequest)
            #expect(bare.errorMessage?.isEmpty == false)
            try await expectServing(client, key: project.ingestKey)
        }
    }

    /// `\u0000` in each string field: a rejected report whose error names the field
    /// (PostgreSQL text cannot hold NUL). A raw NUL byte in a string is not JSON: 400.
    @Test func nulInEveryStringFieldIsRejectedNamingTheField() async throws {
        let project = try await makeProject()
        let nul = "a\u{0}b"
        let cases: [(String, [String: Any])] = [
            ("id:", ["id": nul]),
            ("timestamp:", ["timestamp": nul]),
            ("kind:", ["kind": nul]),
            ("reason:", ["reason": nul]),
            ("stack[1]:", ["stack": ["ok", nul]]),
            ("app.id:", ["app": ["id": nul, "version": "1"]]),
            ("app.version:", ["app": ["id": "a", "version": nul]]),
            ("app.build:", ["app": ["id": "a", "version": "1", "build": nul]]),
            ("device.os:", ["device": ["os": nul]]),
            ("device.osVersion:", ["device": ["osVersion": nul]]),
            ("device.model:", ["device": ["model": nul]]),
            ("device.id:", ["device": ["id": nul]]),
            ("fingerprint[0]:", ["fingerprint": [nul]]),
            ("context key:", ["context": [nul: "v"]]),
            ("context[k]:", ["context": ["k": nul]]),
        ]
        let body = batchBody(cases.map { reportJSON(extra: $0.1) })
        let prefixes = cases.map(\.0)
        let rawNulBody = batchBody([reportJSON(reason: "a~b")])
        #expect(String(decoding: body, as: UTF8.self).contains("\\u0000"))
        try await withApp { client in
            let response = try await client.ingest(key: project.ingestKey, body: body)
            #expect(response.status == .accepted)
            let parsed = try response.decode(IngestResponse.self)
            #expect(parsed.accepted == 0)
            #expect(parsed.rejected.count == prefixes.count)
            let errors = Dictionary(uniqueKeysWithValues: parsed.rejected.map { ($0.index, $0.error) })
            for (index, prefix) in prefixes.enumerated() {
                #expect(errors[index]?.hasPrefix(prefix) == true, "\(prefix) got \(errors[index] ?? "-")")
            }
            // An unescaped NUL byte inside a JSON string is not JSON (RFC 8259): 400.
            let rawNul = rawNulBody.split(separator: UInt8(ascii: "~"), omittingEmptySubsequences: false)
                .map(Array.init).joined(separator: [0])
            let rawResponse = try await client.ingest(key: project.ingestKey, body: Array(rawNul))
            #expect(rawResponse.status == .badRequest)
            #expect(rawResponse.errorMessage?.contains("not JSON") == true)
            try await expectServing(client, key: project.ingestKey)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1)
        }
    }

    /// SQL and JSON injection strings in every field are stored and returned verbatim.
    @Test func injectionStringsAreStoredAndReturnedVerbatim() async throws {
        let project = try await makeProject()
        let payloads = [
            "'; DROP TABLE reports; --",
            "\" OR 1=1 --",
            "x'); DELETE FROM projects WHERE ('1'='1",
            "$1 $$ E'\\\\x00' \\\\",
            "\"}],\"reports\":[{\"id\":\"evil\"}]}",
            "{\"$gt\": \"\"} <script>alert(1)</script> ${jndi:ldap://x} {{7*7}}",
            "\u{202E}rtl \u{FEFF}bom \u{1F4A5} ::jsonb \\u0000",
        ]
        let id = UUID()
        let payload = payloads.joined(separator: " | ")
        let report = reportJSON(
            id: id, kind: "custom", reason: payload,
            extra: [
                "stack": payloads,
                "app": ["id": payloads[0], "version": payloads[1], "build": payloads[2]],
                "device": ["os": payloads[3], "osVersion": payloads[4], "model": payloads[5], "id": payloads[6]],
                "fingerprint": Array(payloads.prefix(8)),
                "context": Dictionary(uniqueKeysWithValues: payloads.enumerated().map { ("\($0.element.prefix(60))#\($0.offset)", $0.element) }),
            ])
        let body = batchBody([report])
        let context = try #require(report["context"] as? [String: String])
        let app = try #require(report["app"] as? [String: String])
        let device = try #require(report["device"] as? [String: String])
        try await withApp { client in
            let response = try await client.ingest(key: project.ingestKey, body: body)
            #expect(response.status == .accepted)
            #expect(try response.decode(IngestResponse.self).accepted == 1)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let rows = try await db.client.query(
                """
                SELECT r.reason, r.app_id, r.app_version, r.app_build, r.os, r.os_version, r.model, r.device_id,
                       r.stack::text, r.fingerprint::text, r.context::text
                FROM reports r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(project.project) AND r.id = \(id)
                """, logger: db.logger)
            var found = 0
            for try await row in rows.decode((String, String, String, String?, String?, String?, String?, String?, String?, String?, String?).self) {
                found += 1
                #expect(row.0 == payload)
                #expect([row.1, row.2, row.3] == [payloads[0], payloads[1], payloads[2]])
                #expect([row.4, row.5, row.6, row.7] == [payloads[3], payloads[4], payloads[5], payloads[6]])
                let stack = try JSONSerialization.jsonObject(with: Data((row.8 ?? "").utf8)) as? [String]
                #expect(stack == payloads)
                let fingerprint = try JSONSerialization.jsonObject(with: Data((row.9 ?? "").utf8)) as? [String]
                #expect(fingerprint == payloads)
                let stored = try JSONSerialization.jsonObject(with: Data((row.10 ?? "").utf8)) as? [String: String]
                #expect(context == stored)
            }
            #expect(found == 1)
            // Nothing was interpreted: the tables are all there and the project is intact.
            let count = try await db.client.query("SELECT count(*)::bigint FROM projects WHERE slug = \(project.project)", logger: db.logger)
            for try await n in count.decode(Int64.self) { #expect(n == 1) }
        }
        // Returned verbatim by the query API (the group's reports list).
        try await withApp { client in
            let auth: HTTPFields = [.authorization: "Bearer \(project.readToken)"]
            let list = try await client.execute(uri: "/v1/projects/\(project.project)/crashes", method: .get, headers: auth)
            try #require(list.status == .ok, "crashes list: \(list.status)")
            let groups = try #require(hostileJSON(list.body)?["groups"] as? [[String: Any]])
            let group = try #require(groups.first)
            let groupID = try #require(group["id"] as? String)
            let reports = try await client.execute(
                uri: "/v1/projects/\(project.project)/crashes/\(groupID)/reports", method: .get, headers: auth)
            try #require(reports.status == .ok)
            let stored = try #require((hostileJSON(reports.body)?["reports"] as? [[String: Any]])?.first)
            #expect(stored["reason"] as? String == payload)
            #expect(stored["stack"] as? [String] == payloads)
            #expect(stored["fingerprint"] as? [String] == payloads)
            #expect(stored["context"] as? [String: String] == context)
            #expect((stored["app"] as? [String: String]) == app)
            #expect((stored["device"] as? [String: String]) == device)
        }
    }

    /// Keys of one project open nothing of another; key kinds never cross.
    @Test func keysOfAnotherProjectOpenNothing() async throws {
        let a = try await makeProject()
        let b = try await makeProject()
        let idA = UUID()
        try await withApp { client in
            #expect(try await client.ingest(key: a.ingestKey, body: batchBody([reportJSON(id: idA)])).status == .accepted)
            // A's read token on B's paths: 404 (B's existence is not revealed by a 403).
            for path in ["crashes", "stats", "crashes/1", "crashes/1/reports"] {
                let r = try await client.execute(
                    uri: "/v1/projects/\(b.project)/\(path)", method: .get, headers: [.authorization: "Bearer \(a.readToken)"])
                #expect(r.status == .notFound, "\(path)")
                #expect(r.errorMessage?.isEmpty == false)
            }
            // Ingest key as a bearer token, read token as an ingest key, a key with a suffix: 401.
            let asBearer = try await client.execute(
                uri: "/v1/projects/\(a.project)/crashes", method: .get, headers: [.authorization: "Bearer \(a.ingestKey)"])
            #expect(asBearer.status == .unauthorized)
            #expect(try await client.ingest(key: a.readToken, body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.ingest(key: a.ingestKey + "x", body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.ingest(key: String(a.ingestKey.dropLast()), body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.ingest(key: "' OR '1'='1", body: batchBody([reportJSON()])).status == .unauthorized)
            // The same report id sent with B's key is B's own report: ids are per project.
            #expect(try await client.ingest(key: b.ingestKey, body: batchBody([reportJSON(id: idA)])).status == .accepted)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: a.project) == [idA])
            #expect(try await db.storedReportIDs(slug: b.project) == [idA])
        }
    }
}
