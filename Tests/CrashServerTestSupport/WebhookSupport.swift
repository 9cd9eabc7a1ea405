import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A real HTTP receiver for webhook tests: a Hummingbird server on 127.0.0.1 (a free port)
/// that records every POST to `/hooks/{name}` and answers as told per name.
final class WebhookReceiver: Sendable {
    /// How a name's requests are answered.
    enum Mode: Sendable, Equatable {
        /// 200.
        case ok
        /// This status, every time.
        case status(Int)
        /// No answer until the mode changes.
        case hold
    }

    /// One request as received.
    struct Received: Sendable {
        var headers: [String: String]
        var body: [UInt8]
        var answered: Int?

        var delivery: String? { headers["x-crashguard-delivery"] }
        var event: String? { headers["x-crashguard-event"] }
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
    }

    private struct State {
        var modes: [String: Mode] = [:]
        var received: [String: [Received]] = [:]
    }

    private let state = Mutex(State())
    private let task: Mutex<Task<Void, any Error>?> = Mutex(nil)
    private let boundPort = Mutex<Int?>(nil)

    var port: Int { boundPort.withLock { $0 } ?? 0 }

    /// The URL of the hook `name`.
    func url(_ name: String) -> String { "http://127.0.0.1:\(port)/hooks/\(name)" }

    func setMode(_ mode: Mode, for name: String) { state.withLock { $0.modes[name] = mode } }

    func received(_ name: String) -> [Received] { state.withLock { $0.received[name] ?? [] } }

    /// Waits until `name` got at least `count` requests matching `filter` (answered or not).
    func wait(
        for name: String, count: Int = 1, timeout: Duration = .seconds(30), where filter: @Sendable (Received) -> Bool = { _ in true }
    ) async throws -> [Received] {
        var got: [Received] = []
        try await waitUntil("hook \(name): \(got.count) of \(count) requests", within: timeout) {
            got = received(name).filter(filter)
            return got.count >= count
        }
        return got
    }

    /// Starts the receiver; returns once it listens.
    static func start() async throws -> WebhookReceiver {
        let receiver = WebhookReceiver()
        let router = Router()
        router.post("/hooks/:name") { request, context -> Response in
            let name = context.parameters.get("name") ?? ""
            let body = Array(buffer: try await request.body.collect(upTo: 1 << 20))
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            headers["host"] = request.head.authority
            let index = receiver.state.withLock { s -> Int in
                s.received[name, default: []].append(Received(headers: headers, body: body, answered: nil))
                return s.received[name]!.count - 1
            }
            while receiver.state.withLock({ $0.modes[name] }) == .hold {
                try await Task.sleep(for: .milliseconds(20))
            }
            var status = 200
            if case .status(let code) = receiver.state.withLock({ $0.modes[name] ?? .ok }) { status = code }
            receiver.state.withLock { $0.received[name]![index].answered = status }
            return Response(status: .init(code: status))
        }
        var logger = Logger(label: "webhook-receiver")
        // Quiet: its shutdown cancels the connections senders keep alive, which it logs as errors.
        logger.logLevel = .critical
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in receiver.boundPort.withLock { $0 = channel.localAddress?.port } }, logger: logger)
        receiver.task.withLock { $0 = Task { try await app.runService(gracefulShutdownSignals: []) } }
        for _ in 0..<500 where receiver.port == 0 { try await Task.sleep(for: .milliseconds(10)) }
        guard receiver.port != 0 else { throw TestFailure("webhook receiver did not start") }
        return receiver
    }

    /// Stops the server (held requests are released first).
    func stop() async {
        state.withLock { s in for key in s.modes.keys { s.modes[key] = .ok } }
        let task = self.task.withLock { $0 }
        task?.cancel()
        _ = await task?.result
    }
}

/// A TCP receiver on 127.0.0.1 (a free port) that misbehaves on purpose, one behavior for
/// every connection: for the contract's hostile receivers, which a well-behaved HTTP server
/// cannot play. Each connection is served by a blocking thread of its own, so no behavior
/// holds a cooperative thread; the receiver counts connections open at once and notices
/// when the sender closes one.
final class HostileReceiver: Sendable {
    enum Behavior: Sendable {
        /// Reads the request and never answers.
        case silent
        /// Sends a complete head (this status, `Content-Length: 100`) and then nothing.
        case headThenHang(status: Int)
        /// Sends a head with this status, then chunked body bytes for as long as they are taken.
        case endlessBody(status: Int)
        /// Sends a status line, then header lines for as long as they are taken.
        case endlessHeaders
        /// Sends these bytes (a whole answer), then waits for the sender to close.
        case answer(String)
    }

    struct Stats: Sendable {
        /// Connections accepted so far.
        var accepted = 0
        /// Connections open now, and the most open at once.
        var open = 0
        var maxOpen = 0
        /// Connections the sender closed (or reset).
        var closedByPeer = 0
        /// The head of each request, as received.
        var heads: [String] = []
    }

    let port: Int
    private let behavior: Behavior
    private let listener: Int32
    private let state = Mutex(Stats())
    private let sockets = Mutex<Set<Int32>>([])

    var stats: Stats { state.withLock { $0 } }

    /// The URL of this receiver (`http://127.0.0.1:<port>/hook`).
    var url: String { "http://127.0.0.1:\(port)/hook" }

    init(_ behavior: Behavior) throws {
        self.behavior = behavior
        (listener, port) = try loopbackListener(backlog: 64)
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Stops listening and closes every connection.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in sockets.withLock({ $0 }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Waits until `condition` holds for the stats (or `timeout` passed); returns them.
    @discardableResult
    func wait(timeout: Duration = .seconds(30), until condition: @Sendable (Stats) -> Bool) async throws -> Stats {
        var now = stats
        try await waitUntil("hostile receiver: \(now)", within: timeout) {
            now = stats
            return condition(now)
        }
        return now
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                close(listener)
                return
            }
            sockets.withLock { _ = $0.insert(fd) }
            state.withLock { s in
                s.accepted += 1
                s.open += 1
                s.maxOpen = max(s.maxOpen, s.open)
            }
            Thread.detachNewThread { [self] in serve(fd) }
        }
    }

    private func serve(_ fd: Int32) {
        let head = readRequest(fd)
        state.withLock { $0.heads.append(head) }
        var closedByPeer = false
        switch behavior {
        case .silent:
            closedByPeer = drain(fd)
        case .headThenHang(let status):
            closedByPeer = !send(fd, "HTTP/1.1 \(status) OK\r\nContent-Length: 100\r\n\r\n") || drain(fd)
        case .endlessBody(let status):
            let chunk = "4000\r\n" + String(repeating: "x", count: 0x4000) + "\r\n"
            closedByPeer = !send(fd, "HTTP/1.1 \(status) OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            while !closedByPeer { closedByPeer = !send(fd, chunk) }
        case .endlessHeaders:
            closedByPeer = !send(fd, "HTTP/1.1 200 OK\r\n")
            var n = 0
            while !closedByPeer {
                n += 1
                closedByPeer = !send(fd, "X-Filler-\(n): \(String(repeating: "y", count: 1000))\r\n")
            }
        case .answer(let text):
            closedByPeer = !send(fd, text) || drain(fd)
        }
        sockets.withLock { _ = $0.remove(fd) }
        close(fd)
        state.withLock { s in
            s.open -= 1
            if closedByPeer { s.closedByPeer += 1 }
        }
    }

    /// The request's head; its body is read too, as long as its `Content-Length`.
    private func readRequest(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let text = String(decoding: bytes, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = String(text[..<end.lowerBound])
                let length =
                    head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.count - text[..<end.upperBound].utf8.count >= length { return head }
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += buffer[0..<n]
        }
    }

    /// Reads until the sender closes: true when it did (false when the receiver was stopped).
    private func drain(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    /// Sends all of `text`; false once the sender has closed or reset.
    private func send(_ fd: Int32, _ text: String) -> Bool { sendAll(fd, Array(text.utf8)) }
}
