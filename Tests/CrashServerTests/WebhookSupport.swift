import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

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
        let deadline = ContinuousClock.now + timeout
        while true {
            let got = received(name).filter(filter)
            if got.count >= count { return got }
            guard ContinuousClock.now < deadline else {
                throw ProcessFailure(description: "hook \(name): \(got.count) of \(count) requests after \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
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
        guard receiver.port != 0 else { throw ProcessFailure(description: "webhook receiver did not start") }
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
