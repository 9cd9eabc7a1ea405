import CrashCompression
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Hardening, "Keys before bodies": every door that takes a body checks its key before it
/// reads body bytes it does not need, and a client without a valid key is refused while it is
/// still sending, within 1 s of the bytes that name (or fail to name) the key. A live server
/// on 127.0.0.1, raw sockets that send the head and part of a body and then stall, and the
/// test PostgreSQL.
@Suite struct KeysBeforeBodiesTests {
    /// A read timeout far past the bounds below: an answer within them is not the 408 of a
    /// stalled body.
    static var configuration: ServerConfiguration {
        TestEnvironment.configuration { $0.readTimeout = .seconds(20) }
    }

    /// The contract's bound: a client that has sent its head and the bytes that decide gets
    /// its answer within 1 s.
    static let bound = Duration.seconds(1)

    /// Sends `head` and `sent` (part of a longer body, as its `Content-Length` says), then
    /// nothing: the answer, and how long after the last byte it came (nil: none within 5 s).
    static func answerWhileSending(port: Int, head: String, sent: [UInt8]) async throws -> (HostileHTTPResponse?, Duration) {
        let socket = try HostileSocket(port: port)
        #expect(socket.send(head))
        #expect(socket.send(sent))
        let started = ContinuousClock.now
        let response = await socket.readResponse(timeout: 5)
        return (response, ContinuousClock.now - started)
    }

    /// The head of a Sentry request with the given extra header lines.
    static func sentryHead(_ path: String, contentLength: Int, extra: [String] = []) -> String {
        (["POST \(path) HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-sentry-envelope", "Content-Length: \(contentLength)"]
            + extra).joined(separator: "\r\n") + "\r\n\r\n"
    }

    /// The start of an envelope whose header line is `header` and whose one event item says it
    /// is `length` bytes long; `payloadSent` bytes of that payload follow.
    static func envelopeStart(header: [String: Any], length: Int, payloadSent: Int) -> [UInt8] {
        SentryIngestTests.json(header) + [0x0A] + SentryIngestTests.json(["type": "event", "length": length]) + [0x0A]
            + [UInt8](repeating: 0x20, count: payloadSent)
    }

    static func detail(_ response: HostileHTTPResponse?) -> String? {
        guard let body = response?.body,
            let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
        else { return nil }
        return object["detail"] as? String
    }

    /// An envelope without a key in its headers or query, whose header line has no `dsn`: 403
    /// once its first line is in, while the rest (about 500 KB) is still to come.
    @Test func aKeylessEnvelopeWithoutDsnIs403WhileTheClientStillSends() async throws {
        let project = try await makeProject()
        try await hostileLiveApp(Self.configuration) { _, port in
            let sent = Self.envelopeStart(header: ["event_id": SentryIngestTests.hex(UUID())], length: 500_000, payloadSent: 1000)
            let (response, elapsed) = try await Self.answerWhileSending(
                port: port, head: Self.sentryHead("/api/\(project.sentryId)/envelope/", contentLength: sent.count + 499_000),
                sent: sent)
            #expect(response?.status == 403, "\(response?.body ?? "no answer")")
            #expect(Self.detail(response)?.contains("sentry_key") == true)
            #expect(response?.headers["connection"] == "close")
            #expect(elapsed < Self.bound, "answered \(elapsed) after the first line")
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.isEmpty)
    }

    /// The same with a `dsn` whose key is not a key of the project: 403 once it is checked.
    @Test func aKeylessEnvelopeWithABadDsnKeyIs403WhileTheClientStillSends() async throws {
        let project = try await makeProject()
        let other = try await makeProject()
        try await hostileLiveApp(Self.configuration) { _, port in
            for key in ["cgi_not-a-key", other.ingestKey] {
                let header: [String: Any] = [
                    "event_id": SentryIngestTests.hex(UUID()), "dsn": "http://\(key)@127.0.0.1:8080/\(project.sentryId)",
                ]
                let sent = Self.envelopeStart(header: header, length: 500_000, payloadSent: 1000)
                let (response, elapsed) = try await Self.answerWhileSending(
                    port: port, head: Self.sentryHead("/api/\(project.sentryId)/envelope/", contentLength: sent.count + 499_000),
                    sent: sent)
                #expect(response?.status == 403, "\(key): \(response?.body ?? "no answer")")
                #expect(Self.detail(response)?.isEmpty == false)
                #expect(elapsed < Self.bound, "\(key): answered \(elapsed) after the first line")
            }
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.isEmpty)
    }

    /// A gzip'd envelope is decoded only as far as its first line: half of a 300 KB compressed
    /// body holds it, and the refusal comes without the rest.
    @Test func aCompressedKeylessEnvelopeIsDecodedOnlyToItsFirstLine() async throws {
        let project = try await makeProject()
        var generator = SystemRandomNumberGenerator()
        let noise = (0..<400_000).map { _ in UInt8(ascii: "a") + UInt8.random(in: 0..<16, using: &generator) }
        let envelope = Self.envelopeStart(header: ["event_id": SentryIngestTests.hex(UUID())], length: noise.count, payloadSent: 0) + noise
        let compressed = try Deflater.compress(envelope, format: .gzip)
        try await hostileLiveApp(Self.configuration) { _, port in
            let (response, elapsed) = try await Self.answerWhileSending(
                port: port,
                head: Self.sentryHead(
                    "/api/\(project.sentryId)/envelope/", contentLength: compressed.count, extra: ["Content-Encoding: gzip"]),
                sent: Array(compressed.prefix(compressed.count / 2)))
            #expect(response?.status == 403, "\(response?.body ?? "no answer")")
            #expect(elapsed < Self.bound, "answered \(elapsed) after the first half")
        }
    }

    /// A first line longer than 64 KiB is refused (400) without reading on.
    @Test func aFirstLineOver64KiBIs400WithoutReadingOn() async throws {
        let project = try await makeProject()
        try await hostileLiveApp(Self.configuration) { _, port in
            let sent = Array(#"{"event_id":""#.utf8) + [UInt8](repeating: 0x61, count: 70 * 1024)
            let (response, elapsed) = try await Self.answerWhileSending(
                port: port, head: Self.sentryHead("/api/\(project.sentryId)/envelope/", contentLength: 500_000), sent: sent)
            #expect(response?.status == 400, "\(response?.body ?? "no answer")")
            #expect(Self.detail(response)?.contains("first line") == true)
            #expect(elapsed < Self.bound, "answered \(elapsed) after 70 KiB")
        }
    }

    /// A keyless envelope with a valid `dsn` key goes on being read from where the first line
    /// ended, compressed or not, and is stored.
    @Test(arguments: [false, true]) func aKeylessEnvelopeWithAValidDsnIsStored(gzipped: Bool) async throws {
        let project = try await makeProject()
        var event = SentryIngestTests.event()
        event["extra"] = ["pad": String(repeating: "x", count: 200_000)]
        let envelope = SentryIngestTests.envelope(
            header: ["event_id": event["event_id"] ?? "", "dsn": "http://\(project.ingestKey)@127.0.0.1:8080/\(project.sentryId)"],
            items: [("event", SentryIngestTests.json(event))])
        let body = gzipped ? try Deflater.compress(envelope, format: .gzip) : envelope
        try await hostileLiveApp(Self.configuration) { client, _ in
            var headers: HTTPFields = [:]
            if gzipped { headers[.contentEncoding] = "gzip" }
            let response = try await client.sentry("/api/\(project.sentryId)/envelope/", headers: headers, body: body)
            #expect(response.status == .ok)
        }
        #expect(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) }.count == 1)
    }

    /// A key in a header or the query is checked before the first body byte: every door
    /// answers a bad or missing one at once while the body is still to come.
    @Test func headerAndQueryKeysAreCheckedBeforeTheBody() async throws {
        let project = try await makeProject()
        let sent = [UInt8](repeating: 0x20, count: 1000)
        let length = 90_000
        let cases: [(String, Int)] = [
            (hostileRequestHead(key: "cgi_not-a-key", contentLength: length), 401),
            (
                ["POST /v1/reports HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", "Content-Length: \(length)"]
                    .joined(separator: "\r\n") + "\r\n\r\n", 401
            ),
            (
                Self.sentryHead(
                    "/api/\(project.sentryId)/envelope/", contentLength: length,
                    extra: ["X-Sentry-Auth: Sentry sentry_version=7, sentry_key=cgi_not-a-key"]), 403
            ),
            (Self.sentryHead("/api/\(project.sentryId)/envelope/?sentry_key=cgi_not-a-key", contentLength: length), 403),
            (Self.sentryHead("/api/\(project.sentryId)/store/", contentLength: length), 403),
            (
                Self.sentryHead(
                    "/api/\(project.sentryId)/store/", contentLength: length,
                    extra: ["Authorization: Sentry sentry_key=\(project.readToken)"]), 403
            ),
            (
                [
                    "POST /v1/projects/\(project.project)/debug-files?name=a.debug HTTP/1.1", "Host: 127.0.0.1",
                    "Content-Type: application/octet-stream", "Authorization: Bearer cgr_not-a-token", "Content-Length: \(length)",
                ]
                .joined(separator: "\r\n") + "\r\n\r\n", 401
            ),
            (
                [
                    "POST /v1/projects/\(project.project)/debug-files?name=a.debug HTTP/1.1", "Host: 127.0.0.1",
                    "Content-Type: application/octet-stream", "Content-Length: \(length)",
                ]
                .joined(separator: "\r\n") + "\r\n\r\n", 401
            ),
        ]
        try await hostileLiveApp(Self.configuration) { _, port in
            for (head, status) in cases {
                let (response, elapsed) = try await Self.answerWhileSending(port: port, head: head, sent: sent)
                let line = head.prefix { $0 != "\r" }
                #expect(response?.status == status, "\(line): \(response?.body ?? "no answer")")
                #expect(elapsed < Self.bound, "\(line): answered \(elapsed) after the first body bytes")
            }
        }
    }
}
