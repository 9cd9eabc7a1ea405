import CodecTestSupport
import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `POST /api/{sentryId}/envelope/` and `/store/` against the real database: every key
/// source, every encoding, idempotency, and the 400/403/413/415/429 answers of the contract.
@Suite struct SentryIngestTests {
    static let authHeader = HTTPField.Name("X-Sentry-Auth")!

    /// A Sentry event as SDKs send it, with a fresh id unless given.
    static func event(
        id: UUID = UUID(), type: String = "ZeroDivisionError", value: String = "division by zero",
        release: String = "com.example.api@2.1.0+42", user: String = "user-7"
    ) -> [String: Any] {
        [
            "event_id": hex(id), "timestamp": Date().timeIntervalSince1970, "platform": "python", "level": "error",
            "release": release, "environment": "production", "user": ["id": user], "tags": ["region": "eu"],
            "exception": [
                "values": [
                    [
                        "type": type, "value": value, "mechanism": ["type": "generic", "handled": true],
                        "stacktrace": [
                            "frames": [
                                ["function": "main", "module": "app", "filename": "app.py", "in_app": true],
                                ["function": "divide", "module": "app.math", "filename": "app/math.py", "in_app": true],
                            ]
                        ],
                    ]
                ]
            ],
        ]
    }

    static func hex(_ id: UUID) -> String { id.uuidString.lowercased().replacingOccurrences(of: "-", with: "") }

    static func json(_ object: Any) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: object)) }

    /// An envelope: header, then each item with `length` (or without, when `withLength` is false).
    static func envelope(header: [String: Any] = [:], items: [(type: String, payload: [UInt8])], withLength: Bool = true) -> [UInt8] {
        var bytes = json(header) + [0x0A]
        for item in items {
            var itemHeader: [String: Any] = ["type": item.type]
            if withLength { itemHeader["length"] = item.payload.count }
            bytes += json(itemHeader) + [0x0A] + item.payload + [0x0A]
        }
        return bytes
    }

    static func eventEnvelope(_ event: [String: Any], withLength: Bool = true) -> [UInt8] {
        envelope(
            header: ["event_id": event["event_id"] ?? "", "sent_at": RFC3339.format(Date())],
            items: [("event", json(event))], withLength: withLength)
    }

    static func auth(_ key: String) -> HTTPFields {
        [authHeader: "Sentry sentry_version=7, sentry_client=crashguard-tests/1.0, sentry_key=\(key)"]
    }

    @Test func envelopeLandsAsAReportMappedAsSpecified() async throws {
        let project = try await makeProject()
        let id = UUID()
        try await withApp { client in
            let response = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event(id: id)))
            #expect(response.status == .ok)
            #expect(try response.json()["id"] as? String == Self.hex(id))
        }
        let reports = try await storedReports(project.project)
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.id == id)
        #expect(report.kind == .exception)
        #expect(report.reason == "ZeroDivisionError: division by zero")
        #expect(report.stack == ["divide (app.math)", "main (app)"])
        #expect(report.fatal == false)
        #expect(report.app == AppInfo(id: "com.example.api", version: "2.1.0", build: "42"))
        #expect(report.device?.id == "user-7")
        #expect(report.context == ["environment": "production", "region": "eu"])
    }

    @Test(arguments: ["header", "query", "dsn", "authorization"])
    func everyKeySource(_ source: String) async throws {
        let project = try await makeProject()
        let event = Self.event()
        var headers = HTTPFields()
        var uri = "/api/\(project.sentryId)/envelope/"
        var header: [String: Any] = ["event_id": event["event_id"]!]
        switch source {
        case "header": headers = Self.auth(project.ingestKey)
        case "query": uri += "?sentry_key=\(project.ingestKey)&sentry_version=7"
        case "authorization": headers[.authorization] = "Sentry sentry_key=\(project.ingestKey), sentry_version=7"
        default: header["dsn"] = "http://\(project.ingestKey)@127.0.0.1:8080/\(project.sentryId)"
        }
        let body = Self.envelope(header: header, items: [("event", Self.json(event))])
        let (target, fields) = (uri, headers)
        try await withApp { client in
            let response = try await client.sentry(target, headers: fields, body: body)
            #expect(response.status == .ok)
        }
        #expect(try await storedReports(project.project).count == 1)
    }

    @Test func wrongMissingOrForeignKeysAre403AndStoreNothing() async throws {
        let project = try await makeProject()
        let other = try await makeProject()
        let body = Self.eventEnvelope(Self.event())
        try await withApp { client in
            let cases: [(String, HTTPFields)] = [
                ("/api/\(project.sentryId)/envelope/", [:]),
                ("/api/\(project.sentryId)/envelope/", Self.auth("cgi_not-a-key")),
                ("/api/\(project.sentryId)/envelope/", Self.auth(other.ingestKey)),  // another project's key
                ("/api/\(project.sentryId)/envelope/", Self.auth(project.readToken)),
                ("/api/\(other.sentryId)/store/", Self.auth(project.ingestKey)),
                ("/api/\(project.sentryId)/store/", [:]),
            ]
            for (uri, headers) in cases {
                let payload = uri.hasSuffix("store/") ? Self.json(Self.event()) : body
                let response = try await client.sentry(uri, headers: headers, body: payload)
                #expect(response.status == .forbidden, "\(uri) \(headers)")
                #expect((try? response.json()["detail"] as? String)?.isEmpty == false)
            }
            // A dsn naming another project's key.
            let foreign = Self.envelope(
                header: ["dsn": "http://\(other.ingestKey)@127.0.0.1:8080/\(project.sentryId)"],
                items: [("event", Self.json(Self.event()))])
            let answer1 = try await client.sentry("/api/\(project.sentryId)/envelope/", body: foreign)
            #expect(answer1.status == .forbidden)
        }
        #expect(try await storedReports(project.project).isEmpty)
        #expect(try await storedReports(other.project).isEmpty)
    }

    @Test(arguments: ["identity", "gzip", "deflate", "raw-deflate", "GZIP", "br", "zstd", "none"])
    func everyEncoding(_ encoding: String) async throws {
        let project = try await makeProject()
        func encoded(_ plain: [UInt8]) throws -> [UInt8] {
            switch encoding {
            case "gzip", "GZIP": return try Deflater.compress(plain, format: .gzip)
            case "deflate": return try Deflater.compress(plain, format: .deflate)
            case "raw-deflate": return Array(try Deflater.compress(plain, format: .deflate).dropFirst(2).dropLast(4))
            case "br": return try TestEncoders.brotli(plain)
            case "zstd": return try TestEncoders.zstd(plain)
            default: return plain
            }
        }
        var fields = Self.auth(project.ingestKey)
        if encoding != "none" { fields[.contentEncoding] = encoding == "raw-deflate" ? "deflate" : encoding }
        let headers = fields
        let envelope = try encoded(Self.eventEnvelope(Self.event()))
        let event = try encoded(Self.json(Self.event()))
        try await withApp { client in
            let answer2 = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: headers, body: envelope)
            #expect(answer2.status == .ok)
            var storeHeaders = headers
            storeHeaders[.contentType] = "application/json"
            let answer3 = try await client.sentry("/api/\(project.sentryId)/store/", headers: storeHeaders, body: event)
            #expect(answer3.status == .ok)
        }
        #expect(try await storedReports(project.project).count == 2)
    }

    @Test func itemsWithoutLengthAndUnknownItems() async throws {
        let project = try await makeProject()
        let event = Self.event()
        let body = Self.envelope(
            header: ["event_id": event["event_id"]!],
            items: [
                ("session", Self.json(["sid": UUID().uuidString, "status": "ok"])),
                ("client_report", Self.json(["discarded_events": []])),
                ("event", Self.json(event)),
                ("attachment", Array("line one\nline two".utf8)),
                ("transaction", Self.json(["type": "transaction"])),
            ])
        try await withApp { client in
            let answer4 = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: body)
            #expect(answer4.status == .ok)
            let noLength = Self.eventEnvelope(Self.event(), withLength: false)
            let answer5 = try await client.sentry("/api/\(project.sentryId)/envelope", headers: Self.auth(project.ingestKey), body: noLength)
            #expect(answer5.status == .ok)
        }
        #expect(try await storedReports(project.project).count == 2)
    }

    @Test func envelopeWithoutAnEventStoresNothingAndSucceeds() async throws {
        let project = try await makeProject()
        let sessionID = UUID()
        let body = Self.envelope(header: ["sent_at": RFC3339.format(Date())], items: [("session", Self.json(["sid": sessionID.uuidString]))])
        try await withApp { client in
            let response = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: body)
            #expect(response.status == .ok)
            let eventID = UUID()
            let withID = Self.envelope(header: ["event_id": Self.hex(eventID)], items: [("client_report", Self.json([:]))])
            let second = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: withID)
            #expect(second.status == .ok)
            #expect(try second.json()["id"] as? String == Self.hex(eventID))
        }
        #expect(try await storedReports(project.project).isEmpty)
    }

    @Test func resentEventsAreNeverCountedTwice() async throws {
        let project = try await makeProject()
        let id = UUID()
        let event = Self.event(id: id)
        let envelope = Self.eventEnvelope(event)
        let storeBody = Self.json(event)
        try await withApp { client in
            for _ in 0..<3 {
                let response = try await client.sentry(
                    "/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: envelope)
                #expect(response.status == .ok)
                #expect(try response.json()["id"] as? String == Self.hex(id))
            }
            // The same event through the store endpoint, and as a CrashGuard report with that id.
            let store = try await client.sentry("/api/\(project.sentryId)/store/", headers: Self.auth(project.ingestKey), body: storeBody)
            #expect(store.status == .ok)
            let v1 = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(id: id)])).decode(IngestResponse.self)
            #expect(v1.duplicates == 1)
        }
        #expect(try await storedReports(project.project).map(\.id) == [id])
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.groups(slug: project.project).map(\.count) == [1])
            #expect(try await db.rollupTotal(slug: project.project) == 1)
        }
    }

    @Test func theSameCrashThroughEitherDoorIsOneGroup() async throws {
        let project = try await makeProject()
        let event = Self.event(type: "ValueError", value: "index 5 beyond bounds [0 .. 2]")
        // The report CrashGuard's SDK would send for the same crash.
        let report = reportJSON(
            kind: "exception", reason: "ValueError: index 17 beyond bounds [0 .. 9]",
            extra: ["stack": ["divide (app.math)", "main (app)"]])
        let envelope = Self.eventEnvelope(event)
        let batch = batchBody([report])
        try await withApp { client in
            let answer6 = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: Self.auth(project.ingestKey), body: envelope)
            #expect(answer6.status == .ok)
            let answer7 = try await client.ingest(key: project.ingestKey, body: batch)
            #expect(answer7.status == .accepted)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let groups = try await db.groups(slug: project.project)
            #expect(groups.map(\.count) == [2])
            let expected = Grouping.signature(
                kind: .exception, reason: "ValueError: index 5 beyond bounds [0 .. 2]", stack: ["divide (app.math)", "main (app)"],
                fingerprint: nil, version: .newProjectDefault)
            #expect(groups.first?.signature == expected.hash)
        }
    }

    @Test func malformedBodiesAre400WithXSentryErrorAndStoreNothing() async throws {
        let project = try await makeProject()
        let valid = Self.eventEnvelope(Self.event())
        let cases: [(String, [UInt8], String?)] = [
            ("envelope/", [], nil),
            ("envelope/", Array("not an envelope".utf8), nil),
            ("envelope/", Array("{}\n{\"type\":\"event\",\"length\":999}\n{}".utf8), nil),
            ("envelope/", Array("{}\n{\"type\":\"event\"}\n[1,2]".utf8), nil),
            ("envelope/", Array("{}\n{\"type\":\"event\"}\n{\"event_id\":\"nope\"}".utf8), nil),
            ("envelope/", Array("{}\n{\"type\":\"event\"}\n{\"message\":".utf8), nil),
            ("envelope/", Array(try Deflater.compress(valid, format: .gzip).dropLast(10)), "gzip"),
            ("envelope/", [0x1F, 0x8B] + [UInt8](repeating: 0xAB, count: 40), "gzip"),
            ("store/", Array("nope".utf8), nil),
            ("store/", [], nil),
        ]
        try await withApp { client in
            for (route, body, encoding) in cases {
                var headers = Self.auth(project.ingestKey)
                if let encoding { headers[.contentEncoding] = encoding }
                let response = try await client.sentry("/api/\(project.sentryId)/\(route)", headers: headers, body: body)
                #expect(response.status == .badRequest, "\(route) \(String(decoding: body.prefix(40), as: UTF8.self))")
                #expect(response.headers[SentryController.errorHeader]?.isEmpty == false)
                #expect((try? response.json()["detail"] as? String)?.isEmpty == false)
            }
            let bad = try await client.sentry("/api/not-a-number/envelope/", headers: Self.auth(project.ingestKey), body: valid)
            #expect(bad.status == .badRequest)
        }
        #expect(try await storedReports(project.project).isEmpty)
    }

    @Test func sizeLimitsAndEncodingsOfV1Apply() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.maxBodyBytes = 4096
            $0.maxDecompressedBytes = 64 * 1024
        }
        var big = Self.event()
        big["extra"] = ["blob": String(repeating: "x", count: 100 * 1024)]
        let bigEnvelope = Self.eventEnvelope(big)
        try await withApp(config) { client in
            let uri = "/api/\(project.sentryId)/envelope/"
            var gzipHeaders = Self.auth(project.ingestKey)
            gzipHeaders[.contentEncoding] = "gzip"
            // Compressed small, inflated over the decompressed limit.
            let bomb = try Deflater.compress(bigEnvelope, format: .gzip)
            #expect(bomb.count < 4096)
            let answer8 = try await client.sentry(uri, headers: gzipHeaders, body: bomb)
            #expect(answer8.status == .contentTooLarge)
            // Over the compressed limit.
            let answer9 = try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: bigEnvelope)
            #expect(answer9.status == .contentTooLarge)
            var unknown = Self.auth(project.ingestKey)
            unknown[.contentEncoding] = "compress"
            let refused = try await client.sentry(uri, headers: unknown, body: Self.eventEnvelope(Self.event()))
            #expect(refused.status == .unsupportedMediaType)
            #expect((try? refused.json()["detail"] as? String)?.isEmpty == false)
        }
        #expect(try await storedReports(project.project).isEmpty)
    }

    @Test func overTheRateLimitIs429WithSentryRateLimits() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.rateLimit = 0.01
            $0.rateBurst = 1
        }
        try await withApp(config) { client in
            let uri = "/api/\(project.sentryId)/envelope/"
            let answer10 = try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event()))
            #expect(answer10.status == .ok)
            let limited = try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event()))
            #expect(limited.status == .tooManyRequests)
            let retryAfter = try #require(limited.headers[.retryAfter].flatMap(Int.init))
            #expect(retryAfter >= 1)
            #expect(limited.headers[SentryController.rateLimitsHeader] == "\(retryAfter)::organization")
            // One limit per project across both doors.
            let answer11 = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()]))
            #expect(answer11.status == .tooManyRequests)
        }
        #expect(try await storedReports(project.project).count == 1)
    }

    @Test func fullQueueIs429() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration()
        let gate = Gate()
        let database = try CrashDatabase(configuration: config, logger: TestEnvironment.logger)
        let batcher = IngestBatcher(
            maxQueuedReports: 1, maxBatchReports: 1, maxBatchBytes: .max, timeout: .seconds(60), metrics: ServerMetrics(),
            logger: TestEnvironment.logger,
            store: { items, _ in
                await gate.wait()
                return Set(items.map(\.key))
            }, probe: {})
        let router = try buildRouter(
            database: database, batcher: batcher, metrics: ServerMetrics(), configuration: config, timeout: .seconds(60),
            logger: TestEnvironment.logger)
        let app = Application(router: router, services: database.services + [batcher], logger: TestEnvironment.logger)
        try await app.test(.router) { client in
            let uri = "/api/\(project.sentryId)/envelope/"
            let first = Task { try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event())) }
            try await gate.waitUntilEntered()
            let second = Task { try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event())) }
            try await waitUntil("the second event is queued", every: .milliseconds(5)) { batcher.queuedReports >= 1 }
            let full = try await client.sentry(uri, headers: Self.auth(project.ingestKey), body: Self.eventEnvelope(Self.event()))
            #expect(full.status == .tooManyRequests)
            #expect(full.headers[.retryAfter] != nil)
            #expect(full.headers[SentryController.rateLimitsHeader]?.hasSuffix("::organization") == true)
            gate.open()
            #expect(try await first.value.status == .ok)
            #expect(try await second.value.status == .ok)
        }
    }

    @Test func unreachableDatabaseIs429() async throws {
        let config = TestEnvironment.configuration {
            $0.databaseURL = "postgres://crashguard@127.0.0.1:1/crashguard?sslmode=disable"
            $0.databaseTimeout = .seconds(5)
        }
        let database = try CrashDatabase(configuration: config, logger: TestEnvironment.logger)
        let batcher = IngestBatcher(
            maxQueuedReports: 1000, maxBatchReports: 100, maxBatchBytes: .max, timeout: .seconds(5), metrics: ServerMetrics(),
            logger: TestEnvironment.logger,
            store: { try await PostgresIngestStore(database: database).store($0, gate: $1) }, probe: { try await database.ping() })
        let router = try buildRouter(
            database: database, batcher: batcher, metrics: ServerMetrics(), configuration: config, timeout: .seconds(5),
            logger: TestEnvironment.logger)
        let app = Application(router: router, services: database.services + [batcher], logger: TestEnvironment.logger)
        try await app.test(.router) { client in
            for route in ["envelope/", "store/"] {
                let body = route == "store/" ? Self.json(Self.event()) : Self.eventEnvelope(Self.event())
                let response = try await client.sentry("/api/1/\(route)", headers: Self.auth("cgi_anything"), body: body)
                #expect(response.status == .tooManyRequests)
                let retryAfter = try #require(response.headers[.retryAfter].flatMap(Int.init))
                #expect(response.headers[SentryController.rateLimitsHeader] == "\(retryAfter)::organization")
            }
        }
    }

    @Test func browserPreflightAndCORS() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let preflight = try await client.execute(
                uri: "/api/\(project.sentryId)/envelope/", method: .options,
                headers: [.origin: "https://app.example.com", .accessControlRequestMethod: "POST"])
            #expect(preflight.status == .ok)
            #expect(preflight.headers[.accessControlAllowOrigin] == "*")
            let response = try await client.sentry(
                "/api/\(project.sentryId)/envelope/?sentry_key=\(project.ingestKey)",
                headers: [.contentType: "text/plain;charset=UTF-8"], body: Self.eventEnvelope(Self.event()))
            #expect(response.status == .ok)
            #expect(response.headers[.accessControlAllowOrigin] == "*")
            #expect(response.headers[.accessControlExposeHeaders]?.contains("X-Sentry-Rate-Limits") == true)
        }
    }

    @Test func recordedCocoaEnvelope() async throws {
        let project = try await makeProject()
        let url = TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/sentry/cocoa-converted-event.json")
        let payload = Array(try Data(contentsOf: url))
        let body = Self.envelope(
            header: ["event_id": "f31ce2b69e8e470c858eed4753fda78c", "sdk": ["name": "sentry.cocoa", "version": "5.0.0-beta.5"]],
            items: [("event", payload)])
        try await withApp { client in
            var headers = Self.auth(project.ingestKey)
            headers[.contentEncoding] = "gzip"
            let response = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: headers, body: try Deflater.compress(body, format: .gzip))
            #expect(response.status == .ok)
            #expect(try response.json()["id"] as? String == "f31ce2b69e8e470c858eed4753fda78c")
        }
        let report = try #require(try await storedReports(project.project).first)
        expectRecordedCocoaReport(report)
        #expect(abs(report.timestamp.timeIntervalSinceNow) < 600)
    }

    @Test func projectsHaveUniqueSentryIdsAndDSNs() async throws {
        let a = try await makeProject()
        let b = try await makeProject()
        #expect(a.sentryId != b.sentryId)
        let printed = try JSONSerialization.jsonObject(with: Data(try a.json(publicURL: "https://crash.example.com").utf8)) as? [String: Any]
        #expect(printed?["sentryId"] as? Int64 == a.sentryId)
        #expect(printed?["sentryDsn"] as? String == "https://\(a.ingestKey)@crash.example.com/\(a.sentryId)")
        let rotated = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotate(slug: a.project) }
        #expect(rotated.sentryId == a.sentryId)
        let list = try await withTestDatabase { try await PostgresProjectStore(database: $0).listJSON(publicURL: "http://127.0.0.1:8080") }
        let entries = try JSONSerialization.jsonObject(with: Data(list.utf8)) as? [[String: Any]] ?? []
        let entry = try #require(entries.first { $0["project"] as? String == a.project })
        #expect(entry["sentryDsn"] as? String == "http://<ingestKey>@127.0.0.1:8080/\(a.sentryId)")
    }

    /// The project's stored reports, read back from the reports table.
    func storedReports(_ slug: String) async throws -> [Report] {
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let rows = try await db.client.query(
                """
                SELECT r.id, r.ts, r.kind, r.reason, r.stack::text, r.fatal, r.app_id, r.app_version, r.app_build,
                       r.os, r.os_version, r.model, r.device_id, r.fingerprint::text, r.context::text
                FROM reports r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(slug) ORDER BY r.ts, r.id
                """, logger: db.logger)
            var reports: [Report] = []
            let decoder = JSONDecoder()
            for try await row in rows {
                let c = try row.decode(
                    (UUID, Date, String, String, String?, Bool?, String, String, String?, String?, String?, String?, String?, String?, String?).self)
                let device = [c.9, c.10, c.11, c.12].allSatisfy { $0 == nil } ? nil : DeviceInfo(os: c.9, osVersion: c.10, model: c.11, id: c.12)
                reports.append(
                    Report(
                        id: c.0, timestamp: c.1, kind: ReportKind(rawValue: c.2) ?? .custom, reason: c.3,
                        stack: try c.4.map { try decoder.decode([String].self, from: Data($0.utf8)) }, fatal: c.5,
                        app: AppInfo(id: c.6, version: c.7, build: c.8), device: device,
                        fingerprint: try c.13.map { try decoder.decode([String].self, from: Data($0.utf8)) },
                        context: try c.14.map { try decoder.decode([String: String].self, from: Data($0.utf8)) }))
            }
            return reports
        }
    }
}

/// Blocks `wait()` callers until `open()`.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, entered: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let resume = state.withLock { state -> Bool in
                state.entered = true
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if resume { continuation.resume() }
        }
    }

    func waitUntilEntered() async throws {
        try await waitUntil("a caller waits at the gate", every: .milliseconds(5)) { state.withLock { $0.entered } }
    }

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension TestClientProtocol {
    /// POST to a Sentry route.
    func sentry(_ uri: String, headers: HTTPFields = [:], body: [UInt8]) async throws -> TestResponse {
        var headers = headers
        if headers[.contentType] == nil { headers[.contentType] = "application/x-sentry-envelope" }
        return try await execute(uri: uri, method: .post, headers: headers, body: ByteBuffer(bytes: body))
    }
}

extension TestResponse {
    /// The body as a JSON object.
    func json() throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any] ?? [:]
    }
}
