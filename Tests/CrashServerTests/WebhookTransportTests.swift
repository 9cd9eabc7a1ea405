import AsyncHTTPClient
import Foundation
import NIOHTTP1
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Webhooks: hostile receivers" and the fixed error texts, one attempt at a
/// time against real receivers on 127.0.0.1 (allowed through the allow list) that hang,
/// stream without end or answer with garbage.
@Suite("Webhook transport")
struct WebhookTransportTests {
    /// An attempt's deadline here: short, so the suite is quick; the bounds below allow a
    /// loaded machine 3 s more.
    static let deadline = 2.0

    /// The bound for attempts that must end by a read limit, not by their 30 s deadline: half
    /// of it, so a machine loaded by the parallel test phase still passes while an attempt
    /// that waits for the deadline fails.
    static let wellWithinLongDeadline = Duration.seconds(15)

    static func transport(deadline: Double = deadline, allowHosts: String = "127.0.0.1") throws -> WebhookTransport {
        WebhookTransport(
            timeout: .seconds(deadline), allowList: try WebhookAllowList(parsing: allowHosts),
            resolver: WebhookResolver { _ in throw WebhookResolver.LookupFailed() }, eventLoopGroup: HTTPClient.defaultEventLoopGroup)
    }

    static func post(_ transport: WebhookTransport, _ url: String) async -> (WebhookAttempt, Duration) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        let start = ContinuousClock.now
        let attempt = await transport.post(url: url, headers: headers, body: Array(#"{"event":"group.new"}"#.utf8))
        return (attempt, ContinuousClock.now - start)
    }

    @Test(
        "a receiver that never answers, or sends its head and then nothing, is cut off at the deadline: timeout",
        arguments: [HostileReceiver.Behavior.silent, .headThenHang(status: 200), .headThenHang(status: 500)])
    func hangingReceiver(behavior: HostileReceiver.Behavior) async throws {
        let receiver = try HostileReceiver(behavior)
        defer { receiver.stop() }
        let (attempt, took) = await Self.post(try Self.transport(), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: nil, error: .timeout))
        #expect(took >= .seconds(Self.deadline - 0.1))
        #expect(took < .seconds(Self.deadline + 3), "\(took)")
        // The connection is closed, not left to the receiver.
        try await receiver.wait(timeout: .seconds(5)) { $0.closedByPeer == 1 && $0.open == 0 }
        #expect(receiver.stats.accepted == 1)
    }

    @Test("a 2xx whose body never ends is a success, read up to 64 KiB and closed well within the deadline")
    func endlessBody() async throws {
        let receiver = try HostileReceiver(.endlessBody(status: 200))
        defer { receiver.stop() }
        // A long deadline: the attempt must end because of the read limit, not the deadline.
        let (attempt, took) = await Self.post(try Self.transport(deadline: 30), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: 200, error: nil))
        #expect(took < Self.wellWithinLongDeadline, "\(took)")
        try await receiver.wait(timeout: .seconds(5)) { $0.closedByPeer == 1 && $0.open == 0 }
    }

    @Test("a non-2xx whose body never ends fails with its status, within the deadline")
    func endlessErrorBody() async throws {
        let receiver = try HostileReceiver(.endlessBody(status: 503))
        defer { receiver.stop() }
        let (attempt, took) = await Self.post(try Self.transport(deadline: 30), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: 503, error: .httpStatus(503)))
        #expect(attempt.error?.description == "HTTP 503")
        #expect(took < Self.wellWithinLongDeadline, "\(took)")
    }

    @Test("a head that never ends is 'answer too large', and closed")
    func endlessHeaders() async throws {
        let receiver = try HostileReceiver(.endlessHeaders)
        defer { receiver.stop() }
        let (attempt, took) = await Self.post(try Self.transport(deadline: 30), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: nil, error: .answerTooLarge))
        #expect(attempt.error?.description == "answer too large")
        #expect(took < Self.wellWithinLongDeadline, "\(took)")
        try await receiver.wait(timeout: .seconds(5)) { $0.closedByPeer == 1 && $0.open == 0 }
    }

    @Test("a body that never ends but trickles is cut off at the deadline: timeout")
    func answerCompleteWithinDeadline() async throws {
        // Content-Length promises 100 bytes and 10 arrive: the answer never completes.
        let receiver = try HostileReceiver(.answer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"))
        defer { receiver.stop() }
        let (attempt, took) = await Self.post(try Self.transport(), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: nil, error: .timeout))
        #expect(took < .seconds(Self.deadline + 3), "\(took)")
    }

    @Test("redirects are not followed: the 3xx is the outcome")
    func redirect() async throws {
        let target = try HostileReceiver(.answer("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
        defer { target.stop() }
        let receiver = try HostileReceiver(
            .answer("HTTP/1.1 307 Temporary Redirect\r\nLocation: \(target.url)\r\nContent-Length: 0\r\n\r\n"))
        defer { receiver.stop() }
        let (attempt, _) = await Self.post(try Self.transport(), receiver.url)
        #expect(attempt == WebhookAttempt(httpStatus: 307, error: .httpStatus(307)))
        #expect(target.stats.accepted == 0)
    }

    @Test("errors never carry a socket, TLS or parser message, nor the receiver's bytes")
    func fixedErrorTexts() async throws {
        let garbage = try HostileReceiver(.answer("SSH-2.0-OpenSSH_9.6 secret-banner\r\n"))
        defer { garbage.stop() }
        // A plain HTTP server: it answers a TLS handshake with a 400, and the handshake fails.
        let plain = try await WebhookReceiver.start()
        let leaky = try HostileReceiver(
            .answer("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 22\r\n\r\npassword=hunter2 db=pg"))
        defer { leaky.stop() }
        let closed = try HostileReceiver(.silent)
        closed.stop()  // nothing listens on its port any more
        try await Task.sleep(for: .milliseconds(100))
        let transport = try Self.transport()
        let cases: [(String, WebhookAttempt)] = [
            (garbage.url, WebhookAttempt(httpStatus: nil, error: .connectionFailed)),
            (plain.url("tls").replacingOccurrences(of: "http://", with: "https://"), WebhookAttempt(httpStatus: nil, error: .connectionFailed)),
            (leaky.url, WebhookAttempt(httpStatus: 500, error: .httpStatus(500))),
            (closed.url, WebhookAttempt(httpStatus: nil, error: .connectionFailed)),
        ]
        for (url, expected) in cases {
            let (attempt, took) = await Self.post(transport, url)
            #expect(attempt == expected, "\(url)")
            #expect(took < .seconds(Self.deadline + 3), "\(url): \(took)")
            let text = attempt.error?.description ?? ""
            #expect(["timeout", "connection failed", "address not allowed", "answer too large", "HTTP 500"].contains(text))
        }
        await plain.stop()
    }

    @Test("a name is connected to at the address its lookup gave: no second lookup, Host keeps the name")
    func pinnedToTheCheckedAddress() async throws {
        let receiver = try await WebhookReceiver.start()
        // `receiver.invalid` has no address in DNS: only the pinned lookup answer can reach it.
        var transport = try Self.transport(allowHosts: "")
        transport.resolver = WebhookResolver { name in
            name == "receiver.invalid" ? [IPAddress(v4: 127, 0, 0, 1)] : []
        }
        transport.refuses = { _ in false }  // loopback stands in for an address on the internet
        let url = "http://receiver.invalid:\(receiver.port)/hooks/pinned"
        let (attempt, _) = await Self.post(transport, url)
        #expect(attempt == WebhookAttempt(httpStatus: 200, error: nil))
        let got = receiver.received("pinned")
        #expect(got.count == 1)
        #expect(got.first?.headers["host"] == "receiver.invalid:\(receiver.port)")

        // With the real rules the same lookup answer is refused, and nothing is sent.
        transport.refuses = { $0.isRefused }
        let (refused, _) = await Self.post(transport, url)
        #expect(refused == WebhookAttempt(httpStatus: nil, error: .addressNotAllowed))
        #expect(refused.error?.description == "address not allowed")
        #expect(receiver.received("pinned").count == 1)
        await receiver.stop()
    }
}
