import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Misbehaving connections against a live server on 127.0.0.1: huge headers, slow
/// bodies, too many requests at once. Each gets its status and a JSON body naming the
/// problem, and other clients keep being served meanwhile.
@Suite(.serialized) struct HostileConnectionTests {
    /// A normal client still gets its 202, quickly.
    private func expectServing(_ client: any TestClientProtocol, key: String, within limit: Duration = .seconds(2)) async throws {
        let started = ContinuousClock.now
        let response = try await client.ingest(key: key, body: batchBody([reportJSON()]))
        #expect(response.status == .accepted)
        #expect(ContinuousClock.now - started < limit)
    }

    @Test(arguments: [200 * 1024, 1 << 20])
    func hugeHeaderIs431AndServerStaysUp(size: Int) async throws {
        let project = try await makeProject()
        try await hostileLiveApp { client, port in
            let socket = try HostileSocket(port: port)
            let head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
            // Send from another task: the server stops reading at its limit.
            let sender = Task.detached {
                _ = socket.send(head)
                var sent = 0
                let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 64 * 1024)
                while sent < size, socket.send(chunk) { sent += chunk.count }
                _ = socket.send("\r\n\r\n")
            }
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            _ = await sender.value
            #expect(closed, "the connection is closed after the refusal")
            // Linux may reset the connection before the answer is read when much of the
            // header is unread; when an answer arrives it must be the 431.
            if size <= 200 * 1024 || !bytes.isEmpty {
                let response = try #require(HostileHTTPResponse(bytes), "answer: \(String(decoding: bytes, as: UTF8.self))")
                #expect(response.status == 431)
                #expect(response.errorMessage?.contains("header") == true)
            }
            try await expectServing(client, key: project.ingestKey)
        }
    }

    /// What NIO's parser refuses gets the contract's `{"error": ...}` body, not a bare 400.
    @Test(arguments: ["Content-Length: abc", "Content-Length: -1", "Content-Length: 99999999999999999999999"])
    func unreadableRequestIs400WithAJSONError(header: String) async throws {
        let project = try await makeProject()
        try await hostileLiveApp { client, port in
            let socket = try HostileSocket(port: port)
            #expect(socket.send("POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\n\(header)\r\n\r\n"))
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            #expect(closed, "the connection is closed after the refusal")
            let response = try #require(HostileHTTPResponse(bytes), "answer: \(String(decoding: bytes, as: UTF8.self))")
            #expect(response.status == 400)
            #expect(response.errorMessage?.hasPrefix("Content-Length") == true, "\(String(describing: response.errorMessage))")
            try await expectServing(client, key: project.ingestKey)
        }
    }

    @Test func slowBodyGets408AtTheReadTimeoutWhileOthersAreServed() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration { $0.readTimeout = .seconds(2) }
        let body = Array(String(decoding: batchBody([reportJSON()]), as: UTF8.self).utf8)
        try await hostileLiveApp(config) { client, port in
            let socket = try HostileSocket(port: port)
            #expect(socket.send(hostileRequestHead(key: project.ingestKey, contentLength: body.count)))
            let started = ContinuousClock.now
            // One byte every 200 ms: never idle, never done.
            let trickle = Task.detached {
                for byte in body.prefix(body.count - 1) {
                    guard socket.send([byte]) else { return }
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
            // Others are served while the slow client holds its connection.
            for _ in 0..<5 { try await expectServing(client, key: project.ingestKey) }
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            let elapsed = ContinuousClock.now - started
            trickle.cancel()
            #expect(closed)
            let response = try #require(HostileHTTPResponse(bytes), "answer: \(String(decoding: bytes, as: UTF8.self))")
            #expect(response.status == 408)
            #expect(response.headers["connection"] == "close")
            #expect(response.errorMessage?.contains("read timeout") == true)
            #expect(elapsed >= .milliseconds(1900) && elapsed < .seconds(5), "dropped after \(elapsed)")
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 5)
        }
    }

    /// The read timeout counts the time the server waits for the client, not the time it
    /// takes to work through what it has: a fast client of a busy server is not cut off.
    @Test func aServerSlowToReadABodyDoesNotCutAFastClientOff() async throws {
        let router = Router()
        router.post("/slow") { request, _ -> String in
            var total = 0
            for try await chunk in request.body {
                total += chunk.readableBytes
                try await Task.sleep(for: .milliseconds(20))
            }
            return "\(total)"
        }
        let limits = ConnectionLimits(readTimeout: .seconds(1), maxConnections: 10)
        let counter = ConnectionCounter()
        let app = Application(
            router: router,
            server: .http1(configuration: .init(additionalChannelHandlers: [ConnectionGuardHandler(limits: limits, counter: counter)])),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let socket = try HostileSocket(port: try #require(client.port))
            // 8 MiB at once: the server takes seconds to read it, holding back reads meanwhile.
            let body = [UInt8](repeating: UInt8(ascii: "a"), count: 8 << 20)
            let sender = Task.detached {
                socket.send("POST /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n\r\n") && socket.send(body)
            }
            let started = ContinuousClock.now
            let response = await socket.readResponse(timeout: 60)
            #expect(await sender.value)
            #expect(response?.status == 200, "\(response?.body ?? "no answer")")
            #expect(response?.body == "\(body.count)")
            #expect(ContinuousClock.now - started > .seconds(1), "the body took longer than the read timeout to read")
        }
    }

    @Test func slowHeadersGet408AtTheReadTimeout() async throws {
        let config = TestEnvironment.configuration { $0.readTimeout = .seconds(1) }
        try await hostileLiveApp(config) { client, port in
            let socket = try HostileSocket(port: port)
            #expect(socket.send("POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Crash-"))
            let started = ContinuousClock.now
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            #expect(closed)
            #expect(ContinuousClock.now - started < .seconds(4))
            let response = try #require(HostileHTTPResponse(bytes))
            #expect(response.status == 408)
            #expect(response.errorMessage?.contains("read timeout") == true)
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
        }
    }

    /// A request on a kept-alive connection gets the whole read timeout from its own first
    /// byte, though the connection's timer was set for the request before it (the timer fires
    /// then, and sets itself again for the rest).
    @Test func aLaterRequestOnTheConnectionGetsItsWholeReadTimeout() async throws {
        let config = TestEnvironment.configuration { $0.readTimeout = .seconds(2) }
        try await hostileLiveApp(config) { _, port in
            let socket = try HostileSocket(port: port)
            #expect(socket.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
            #expect(await socket.readResponse(timeout: 5)?.status == 200)
            try await Task.sleep(for: .seconds(1))
            #expect(socket.send("POST /v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Crash-"))
            let started = ContinuousClock.now
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            let elapsed = ContinuousClock.now - started
            #expect(closed)
            #expect(HostileHTTPResponse(bytes)?.status == 408, "answer: \(String(decoding: bytes, as: UTF8.self))")
            #expect(elapsed >= .milliseconds(1900) && elapsed < .seconds(4), "dropped after \(elapsed)")
        }
    }

    @Test func idleKeepAliveConnectionIsClosedAtTheIdleTimeout() async throws {
        let config = TestEnvironment.configuration {
            $0.idleTimeout = .seconds(1)
            $0.readTimeout = .seconds(30)
        }
        try await hostileLiveApp(config) { _, port in
            let socket = try HostileSocket(port: port)
            #expect(socket.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
            let started = ContinuousClock.now
            let (bytes, closed) = await socket.readUntilClosed(timeout: 10)
            #expect(HostileHTTPResponse(bytes)?.status == 200)
            #expect(closed)
            #expect(ContinuousClock.now - started < .seconds(4))
        }
    }

    @Test func uploadsOverTheirPoolAreRefusedAndOtherRequestsServed() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.maxConcurrentRequests = 4
            $0.ingestShare = 0.5  // two upload slots, two for the rest
            $0.readTimeout = .seconds(10)
        }
        try await hostileLiveApp(config) { client, port in
            // Two uploads in flight fill their pool: heads sent, bodies held back.
            let holders = try (0..<2).map { _ in try HostileSocket(port: port) }
            for socket in holders {
                #expect(socket.send(hostileRequestHead(key: project.ingestKey, contentLength: 1000, extra: ["Connection: close"]) + "{"))
            }
            try await Task.sleep(for: .milliseconds(300))
            // Every upload route is refused at once, before authentication or routing.
            let body = gzip(batchBody([reportJSON()]))
            let ingest = try await hostileExchange(
                port: port, head: hostileRequestHead(key: project.ingestKey, contentLength: body.count, encoding: "gzip"), body: body)
            #expect(ingest?.status == 503)
            #expect(ingest?.headers["retry-after"] == "1")
            #expect(ingest?.errorMessage?.contains("limit of 2 concurrent uploads") == true, "\(ingest?.body ?? "no answer")")
            let sentry = try await hostileExchange(
                port: port,
                head: "POST /api/1/envelope/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n", body: Array("{}".utf8))
            #expect(sentry?.status == 429, "Sentry SDKs drop an event on a 5xx")
            #expect(sentry?.headers["x-sentry-rate-limits"] == "1::organization")
            #expect(sentry?.headers["retry-after"] == "1")
            let debugFile = try await hostileExchange(
                port: port,
                head: "POST /v1/projects/\(project.project)/debug-files?name=a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\n",
                body: Array("\u{7F}ELF".utf8))
            #expect(debugFile?.status == 503)
            // Queries, health and metrics are served from the other pool.
            let query = try await client.execute(
                uri: "/v1/projects/\(project.project)/crashes", method: .get, headers: [.authorization: "Bearer \(project.readToken)"])
            #expect(query.status == .ok)
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(String(buffer: metrics.body).contains(#"crashguard_requests_in_flight{pool="uploads"} 2"#))
            // Freed slots serve again.
            for socket in holders { _ = socket.send([UInt8](repeating: 0x20, count: 999)) }
            for socket in holders {
                let (bytes, _) = await socket.readUntilClosed(timeout: 3)
                #expect(HostileHTTPResponse(bytes)?.status == 400)  // "{" and spaces: not JSON
            }
            try await expectServing(client, key: project.ingestKey)
        }
    }

    @Test func connectionsOverTheLimitGet503AndAreClosed() async throws {
        var config = TestEnvironment.configuration()
        config.maxConnections = 2
        let app = try await buildApplication(configuration: config, logger: TestEnvironment.logger)
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let held = try (0..<2).map { _ in try HostileSocket(port: port) }
            try await Task.sleep(for: .milliseconds(200))
            let third = try HostileSocket(port: port)
            #expect(third.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
            let (bytes, closed) = await third.readUntilClosed(timeout: 5)
            #expect(closed)
            let response = try #require(HostileHTTPResponse(bytes))
            #expect(response.status == 503)
            #expect(response.headers["retry-after"] == "1")
            #expect(response.errorMessage?.contains("connections") == true)
            // The held connections are served.
            #expect(held[0].send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
            #expect(HostileHTTPResponse(await held[0].readUntilClosed(timeout: 5).bytes)?.status == 200)
        }
    }

    @Test func concurrencyLimitUnit() async throws {
        let counter = InFlightCounter()
        #expect(counter.enter(limit: 2))
        #expect(counter.enter(limit: 2))
        #expect(!counter.enter(limit: 2))
        counter.leave()
        #expect(counter.enter(limit: 2))
        #expect(counter.current == 2)
    }

    @Test func poolsSplitTheLimit() {
        let defaults = RequestPools(limit: 1024, ingestShare: 0.75)
        #expect(defaults.uploads.limit == 768 && defaults.others.limit == 256)
        let smallest = RequestPools(limit: 2, ingestShare: 0.75)
        #expect(smallest.uploads.limit == 1 && smallest.others.limit == 1)
        #expect(RequestPools(limit: 10, ingestShare: 0.01).uploads.limit == 1)
        #expect(RequestPools(limit: 10, ingestShare: 0.99).others.limit == 1)
    }

    @Test(arguments: [
        ("POST", "/v1/reports", RequestPools.Kind.uploads), ("POST", "/v1/reports/", .uploads),
        ("POST", "/api/42/envelope/", .uploads), ("POST", "/api/42/store/", .uploads), ("POST", "/api/42/store", .uploads),
        ("POST", "/v1/projects/app/debug-files", .uploads),
        ("GET", "/v1/reports", .others), ("OPTIONS", "/api/42/envelope/", .others), ("GET", "/v1/projects/app/crashes", .others),
        ("POST", "/v1/projects/app/webhooks", .others), ("POST", "/signin", .others), ("GET", "/", .others),
        ("POST", "/api/42/other/", .others), ("POST", "/v1/projects/app/crashes/1", .others),
    ])
    func requestsGoToTheirPool(method: String, path: String, kind: RequestPools.Kind) throws {
        let method = try #require(HTTPRequest.Method(method))
        #expect(RequestPools.kind(method: method, path: path) == kind)
    }
}
