import CrashCompression
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `POST /v1/apple/reports` against the real PostgreSQL (`apple.md`, "The Apple door"): `.ips`
/// and MetricKit bodies stored and answered like `/v1/reports`, resends as duplicates, grouping
/// across load addresses, and every refusal (400, 401, 413, 415) storing nothing.
@Suite struct AppleIngestTests {
    static let path = "/v1/apple/reports"

    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/\(name)")))
    }

    /// The fixture's header and body objects.
    static func ipsParts(_ name: String) throws -> (header: [String: Any], body: [String: Any]) {
        let bytes = try fixture(name)
        let newline = bytes.firstIndex(of: 0x0A)!
        return (
            try JSONSerialization.jsonObject(with: Data(bytes[..<newline])) as! [String: Any],
            try JSONSerialization.jsonObject(with: Data(bytes[(newline + 1)...])) as! [String: Any]
        )
    }

    static func ips(_ header: [String: Any], _ body: [String: Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: header)) + [0x0A] + Array(try! JSONSerialization.data(withJSONObject: body))
    }

    static func post(
        _ client: some TestClientProtocol, key: String?, body: [UInt8], contentType: String? = "application/x-ips",
        encoding: String? = "gzip"
    ) async throws -> TestResponse {
        try await client.postIngest(path, key: key, body: body, encoding: encoding, contentType: contentType)
    }

    static func counts(_ response: TestResponse) throws -> IngestResponse { try response.decode(IngestResponse.self) }

    @Test func ipsIsStoredAndItsResendIsADuplicate() async throws {
        let project = try await makeProject()
        let body = try Self.fixture("crash-segv.ips")
        try await withApp { client in
            var response = try await Self.post(client, key: project.ingestKey, body: body)
            #expect(response.status == .accepted)
            #expect(try Self.counts(response) == IngestResponse(accepted: 1, duplicates: 0, rejected: []))
            // The same file again, as application/json and without compression.
            response = try await Self.post(client, key: project.ingestKey, body: body, contentType: "application/json; charset=utf-8", encoding: nil)
            #expect(response.status == .accepted)
            #expect(try Self.counts(response) == IngestResponse(accepted: 0, duplicates: 1, rejected: []))
        }
        let stored = try await SentryIngestTests().storedReports(project.project)
        let report = try #require(stored.first)
        #expect(stored.count == 1)
        #expect(report.id == UUID(uuidString: "8C2B5D1A-3E4F-4A6B-9C7D-0E1F2A3B4C5D"))
        #expect(report.kind == .signal)
        #expect(report.fatal == true)
        #expect(report.stack?.first == "0 Crashy 0x10291b98c 0x102914000 + 31116")
        #expect(report.context?["image.0"] == "0x102914000 81920 6f0a3c1e-5b2d-3c4e-9a8f-1d2e3f405162 Crashy")
        #expect(report.app == AppInfo(id: "com.example.crashy", version: "2.3.1", build: "417"))
        #expect(report.device?.os == "iOS")
    }

    @Test func metricKitPayloadStoresEachCrashOnceAcrossResends() async throws {
        let project = try await makeProject()
        let body = try Self.fixture("metrickit-payload.json")
        let object = try JSONSerialization.jsonObject(with: Data(body))
        let compact = Array(try JSONSerialization.data(withJSONObject: object))
        try await withApp { client in
            var response = try await Self.post(client, key: project.ingestKey, body: body, contentType: "application/json", encoding: "br")
            #expect(response.status == .accepted)
            #expect(try Self.counts(response) == IngestResponse(accepted: 2, duplicates: 0, rejected: []))
            response = try await Self.post(client, key: project.ingestKey, body: compact, contentType: "application/json", encoding: "zstd")
            #expect(try Self.counts(response) == IngestResponse(accepted: 0, duplicates: 2, rejected: []))
        }
        let stored = try await SentryIngestTests().storedReports(project.project)
        #expect(stored.count == 2)
        #expect(Set(stored.map(\.kind)) == [.signal, .exception])
        let groups = try await withTestDatabase { try await $0.groups(slug: project.project) }
        #expect(groups.count == 2)
    }

    @Test func aCrashWithoutAppVersionIsRejectedAndTheOthersStored() async throws {
        let project = try await makeProject()
        var payload = try JSONSerialization.jsonObject(with: Data(try Self.fixture("metrickit-payload.json"))) as! [String: Any]
        var crashes = payload["crashDiagnostics"] as! [[String: Any]]
        var meta = crashes[1]["diagnosticMetaData"] as! [String: Any]
        meta["appVersion"] = nil
        crashes[1]["diagnosticMetaData"] = meta
        payload["crashDiagnostics"] = crashes
        let bytes = Array(try JSONSerialization.data(withJSONObject: payload))
        try await withApp { client in
            let response = try await Self.post(client, key: project.ingestKey, body: bytes, contentType: "application/json")
            #expect(response.status == .accepted)
            let counts = try Self.counts(response)
            #expect(counts.accepted == 1)
            #expect(counts.rejected.map(\.index) == [1])
            #expect(counts.rejected.first?.error.hasPrefix("app.version") == true)
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.count == 1)
    }

    @Test func oneIpsCrashAtTwoLoadAddressesIsOneGroup() async throws {
        let project = try await makeProject()
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        let first = Self.ips(header, body)
        header["incident_id"] = UUID().uuidString
        body["incident"] = header["incident_id"]
        body["usedImages"] = (body["usedImages"] as! [[String: Any]]).map { image in
            var image = image
            if let base = image["base"] as? Int, base > 0 { image["base"] = base + 0x3_8000 }
            return image
        }
        let moved = Self.ips(header, body)
        var threads = body["threads"] as! [[String: Any]]
        var frames = threads[1]["frames"] as! [[String: Any]]
        frames[0]["imageOffset"] = 31240
        threads[1]["frames"] = frames
        body["threads"] = threads
        header["incident_id"] = UUID().uuidString
        let otherSite = Self.ips(header, body)
        try await withApp { client in
            for bytes in [first, moved, otherSite] {
                let response = try await Self.post(client, key: project.ingestKey, body: bytes)
                #expect(try Self.counts(response).accepted == 1)
            }
        }
        let groups = try await withTestDatabase { try await $0.groups(slug: project.project) }
        #expect(groups.map(\.count) == [2, 1])
    }

    @Test func refusalsStoreNothing() async throws {
        let project = try await makeProject()
        let (header, body) = try Self.ipsParts("crash-segv.ips")
        var hang = header
        hang["bug_type"] = "288"
        let valid = try Self.fixture("crash-segv.ips")
        let hangBytes = Self.ips(hang, body)
        let headerLine = Array(try JSONSerialization.data(withJSONObject: header))
        let bodyText = Array(try JSONSerialization.data(withJSONObject: body))
        try await withApp { client in
            // 401: no key, an unknown key, the read token.
            for key in [nil, "cgi_unknown", project.readToken] {
                let response = try await Self.post(client, key: key, body: valid)
                #expect(response.status == .unauthorized)
            }
            // 415: media types and codings.
            for type in [nil, "text/plain", "application/x-sentry-envelope"] {
                let response = try await Self.post(client, key: project.ingestKey, body: valid, contentType: type)
                #expect(response.status == .unsupportedMediaType, "\(type ?? "none")")
            }
            let mixedCase = try await Self.post(client, key: project.ingestKey, body: valid, contentType: "Application/X-IPS")
            #expect(mixedCase.status == .accepted)
            var response = try await client.execute(
                uri: Self.path, method: .post,
                headers: [HTTPField.Name("X-Crash-Key")!: project.ingestKey, .contentType: "application/x-ips", .contentEncoding: "compress"],
                body: ByteBuffer(bytes: valid))
            #expect(response.status == .unsupportedMediaType)
            // 400: another bug type, a truncated body, no body line, neither format, empty.
            for bad in [
                hangBytes, headerLine + [0x0A] + bodyText.prefix(500), headerLine, Array("{\"reports\":[]}".utf8), [],
            ] {
                response = try await Self.post(client, key: project.ingestKey, body: bad)
                #expect(response.status == .badRequest)
                #expect(response.errorMessage?.isEmpty == false)
            }
            response = try await Self.post(client, key: project.ingestKey, body: hangBytes)
            #expect(response.errorMessage?.contains("bug_type 288") == true)
        }
        // Only the one valid upload was stored.
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.count == 1)
    }

    @Test func bodiesOverTheLimitsAre413() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.maxBodyBytes = 4096
            $0.maxDecompressedBytes = 4096
        }
        let valid = try Self.fixture("crash-segv.ips")
        #expect(valid.count > 4096)
        #expect(gzip(valid).count < 4096)
        try await withApp(config) { client in
            // Uncompressed, over the body limit; gzip under it but over the decompressed limit.
            let plain = try await Self.post(client, key: project.ingestKey, body: valid, encoding: nil)
            #expect(plain.status == .contentTooLarge)
            let gzipped = try await Self.post(client, key: project.ingestKey, body: valid, encoding: "gzip")
            #expect(gzipped.status == .contentTooLarge)
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.isEmpty)
    }

    @Test func aProjectsReportsStayItsOwn() async throws {
        let a = try await makeProject()
        let b = try await makeProject()
        let body = try Self.fixture("crash-segv.ips")
        try await withApp { client in
            let first = try await Self.post(client, key: a.ingestKey, body: body)
            #expect(try Self.counts(first).accepted == 1)
            // The same incident in another project is that project's first copy, not a duplicate.
            let second = try await Self.post(client, key: b.ingestKey, body: body)
            #expect(try Self.counts(second).accepted == 1)
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: a.project) }.count == 1)
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: b.project) }.count == 1)
    }
}
