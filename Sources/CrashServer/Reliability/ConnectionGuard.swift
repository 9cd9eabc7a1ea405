import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import Synchronization

/// Per-connection limits that Hummingbird's HTTP/1 channel does not enforce by itself.
///
/// - **Read timeout** (`CRASHGUARD_READ_TIMEOUT`, 30 s): a request must be complete (head
///   and body) within the timeout of its first byte arriving. Else the server answers 408
///   with `{"error": ...}` (when no response has started) and closes the connection: a
///   slowloris client, slow in its headers or its body, holds a connection for at most the
///   read timeout. A connection that sends nothing is left to the idle timeout.
/// - **Connections** (`CRASHGUARD_MAX_CONNECTIONS`, 10000): a connection over the limit is
///   answered 503 with `Retry-After: 1` on its first request, then closed.
/// - **Header size**: NIO's decoder stops at 80 KiB of header fields (Hummingbird's
///   default); the server answers 431 with `{"error": ...}` and closes the connection,
///   having buffered no more than the limit.
///
/// Idle keep-alive connections are closed by Hummingbird after `CRASHGUARD_IDLE_TIMEOUT`.
public struct ConnectionLimits: Sendable {
    /// Seconds a client may take to deliver a request.
    public var readTimeout: Double
    /// Connections served at once.
    public var maxConnections: Int
    /// Header bytes accepted (NIO decoder limit; Hummingbird's default).
    public var maxHeaderBytes: Int = 80 * 1024

    public init(readTimeout: Double, maxConnections: Int) {
        self.readTimeout = readTimeout
        self.maxConnections = maxConnections
    }

    /// Limits from the configuration.
    public init(configuration: ServerConfiguration) {
        self.init(readTimeout: configuration.readTimeout, maxConnections: configuration.maxConnections)
    }
}

/// Open connections, shared by every connection's guard.
public final class ConnectionCounter: Sendable {
    private let count = Atomic<Int>(0)
    public init() {}
    func increment() -> Int { count.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue }
    func decrement() { count.wrappingSubtract(1, ordering: .acquiringAndReleasing) }
    /// Connections open now.
    public var current: Int { count.load(ordering: .relaxed) }
}

/// The channel handler enforcing ``ConnectionLimits`` on one connection. Sits after the
/// HTTP/1 codec (Hummingbird's `additionalChannelHandlers`), so it sees request and
/// response parts; everything runs on the connection's event loop.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let limits: ConnectionLimits
    private let counter: ConnectionCounter
    private var counted = false
    private var refusing = false
    private var headsRead = 0
    private var responsesEnded = 0
    private var responseStarted = false
    private var readingRequest = false
    private var timer: Scheduled<Void>?
    private var finished = false
    private var context: ChannelHandlerContext?
    private var headSeen = false

    init(limits: ConnectionLimits, counter: ConnectionCounter) {
        self.limits = limits
        self.counter = counter
    }

    private var timeout: TimeAmount { .milliseconds(Int64(limits.readTimeout * 1000)) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // A watcher in front of the HTTP decoder tells when a request's first byte arrives.
        try? context.pipeline.syncOperations.addHandler(RequestStartWatcher(guardHandler: self), position: .first)
        if context.channel.isActive { activate(context) }
    }

    /// Bytes arrived on the socket: when no request is open, one starts now.
    fileprivate func bytesArrived() {
        guard let context, !readingRequest, !finished else { return }
        readingRequest = true
        headSeen = false
        startTimer(context)
    }

    func channelActive(context: ChannelHandlerContext) {
        activate(context)
        context.fireChannelActive()
    }

    private func activate(_ context: ChannelHandlerContext) {
        guard !counted else { return }
        counted = true
        if counter.increment() > limits.maxConnections { refusing = true }
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
        self.context = nil
    }

    private func release() {
        timer?.cancel()
        timer = nil
        if counted {
            counted = false
            counter.decrement()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if finished { return }
        let part = unwrapInboundIn(data)
        if refusing {
            if case .head = part {
                respond(
                    context, status: .serviceUnavailable, retryAfter: 1,
                    message: "server is at its limit of \(limits.maxConnections) connections; retry later")
            }
            return
        }
        switch part {
        case .head:
            headsRead += 1
            readingRequest = true
            headSeen = true
            startTimer(context)  // running since the request's first byte
        case .body:
            break
        case .end:
            readingRequest = false
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head: responseStarted = true
        case .body: break
        case .end:
            responsesEnded += 1
            responseStarted = false
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let parse = error as? HTTPParserError, parse == .headerOverflow, !finished,
            responsesEnded == headsRead, !responseStarted
        {
            respond(
                context, status: .requestHeaderFieldsTooLarge, retryAfter: nil,
                message: "request headers are over the \(limits.maxHeaderBytes / 1024) KiB limit")
            return
        }
        context.fireErrorCaught(error)
    }

    private func startTimer(_ context: ChannelHandlerContext) {
        guard timer == nil else { return }
        timer = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(in: timeout) {
            self.timer = nil
            self.timedOut(context)
        }
    }

    private func timedOut(_ context: ChannelHandlerContext) {
        guard readingRequest, !finished, context.channel.isActive else { return }
        // Answer only when this request is the one being answered next and nothing of its
        // response is out yet; otherwise (or before any request) just close.
        let unanswered = headsRead - responsesEnded
        if !responseStarted, unanswered == (headSeen ? 1 : 0) {
            respond(
                context, status: .requestTimeout, retryAfter: nil,
                message: "request not received within the \(Self.seconds(limits.readTimeout)) s read timeout")
        } else {
            finished = true
            context.close(promise: nil)
        }
    }

    /// Writes a complete `{"error": message}` response with `Connection: close`, then closes.
    private func respond(_ context: ChannelHandlerContext, status: HTTPResponse.Status, retryAfter: Int?, message: String) {
        guard !finished else { return }
        finished = true
        let body = APIError.body(message)
        var fields: HTTPFields = [
            .contentType: "application/json; charset=utf-8", .connection: "close",
            .contentLength: String(body.readableBytes),
        ]
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        done.futureResult.assumeIsolatedUnsafeUnchecked().whenComplete { _ in
            context.close(promise: nil)
        }
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

/// Sits first in the pipeline (raw bytes, before the HTTP decoder) and reports every read
/// to the connection's guard, so a request is timed from its first byte, headers included.
private final class RequestStartWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let guardHandler: ConnectionGuardHandler

    init(guardHandler: ConnectionGuardHandler) {
        self.guardHandler = guardHandler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guardHandler.bytesArrived()
        context.fireChannelRead(data)
    }
}
