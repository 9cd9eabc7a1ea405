import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import Synchronization

/// Per-connection limits that Hummingbird's HTTP/1 channel does not enforce by itself.
///
/// - **Read timeout** (`CRASHGUARD_READ_TIMEOUT`, 30 s): from its first byte, a request must
///   be complete (head and body) after the server has waited at most the timeout for it.
///   Else the server answers 408 with `{"error": ...}` (when no response has started) and
///   closes the connection: a slowloris client, slow in its headers or its body, holds a
///   connection for at most the read timeout. Only waiting counts: while the server holds
///   back reading because it is still busy with the bytes it has (backpressure: a large body
///   decoded on a busy server), the clock stops, so a fast client is never cut off for the
///   server's slowness. A connection that sends nothing is left to the idle timeout.
/// - **Connections** (`CRASHGUARD_MAX_CONNECTIONS`, 10000): a connection over the limit is
///   answered 503 with `Retry-After: 1` on its first request, then closed.
/// - **Header size**: NIO's decoder stops at 80 KiB of header fields (Hummingbird's
///   default); the server answers 431 with `{"error": ...}` and closes the connection,
///   having buffered no more than the limit.
/// - **Answered before received**: a response that starts before its request has been
///   received completely (a refusal before the body is read: 503 at the concurrency limit,
///   401, 413, 429...) says `Connection: close` and ends the connection, instead of leaving
///   Hummingbird to read and discard the rest of the body: a refused slow sender would keep
///   its connection for the whole read timeout. After the response the server stops
///   writing (FIN) and discards what still arrives until the request ends or ``lingerSeconds``
///   pass, then closes: closing at once, with body bytes unread, would send a reset that can
///   destroy the response before the client reads it.
///
/// Idle keep-alive connections are closed by Hummingbird after `CRASHGUARD_IDLE_TIMEOUT`.
public struct ConnectionLimits: Sendable {
    /// How long a client may take to deliver a request.
    public var readTimeout: Duration
    /// Connections served at once.
    public var maxConnections: Int
    /// Header bytes accepted (NIO decoder limit; Hummingbird's default).
    public var maxHeaderBytes: Int = 80 * 1024
    /// Seconds a connection answered before its request was received keeps discarding input.
    public var lingerSeconds: Double = 2

    public init(readTimeout: Duration, maxConnections: Int) {
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
    private var endsRead = 0
    private var responsesEnded = 0
    private var responseStarted = false
    private var readingRequest = false
    /// Fires at the read timeout or before it (then it sets itself again for the rest, if the
    /// server is still waiting); set when a wait starts and no timer is set.
    private var timer: Scheduled<Void>?
    /// A read has been asked for (the server wants bytes) and has not completed.
    private var readAsked = false
    /// Time the server has waited for the open request's bytes, before `waitingSince`.
    private var waited: TimeAmount = .zero
    /// Since when the server waits for the open request's bytes (nil: not waiting).
    private var waitingSince: NIODeadline?
    private var lingerTimer: Scheduled<Void>?
    private var finished = false
    private var context: ChannelHandlerContext?
    private var headSeen = false
    /// The response being written was started before its request was received completely.
    private var answeringEarly = false
    /// Output closed after an early answer; input is discarded until the connection closes.
    private var lingering = false

    init(limits: ConnectionLimits, counter: ConnectionCounter) {
        self.limits = limits
        self.counter = counter
    }

    private var timeout: TimeAmount { TimeAmount(limits.readTimeout) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // A watcher in front of the HTTP decoder tells when a request's first byte arrives.
        try? context.pipeline.syncOperations.addHandler(RequestStartWatcher(guardHandler: self), position: .first)
        if context.channel.isActive { activate(context) }
    }

    /// Bytes arrived on the socket: when no request is open, one starts now.
    fileprivate func bytesArrived() {
        guard let context, !readingRequest, !finished else { return }
        headSeen = false
        startRequest(context)
    }

    // MARK: - The read clock

    /// The first byte of a request: its clock starts from zero.
    private func startRequest(_ context: ChannelHandlerContext) {
        readingRequest = true
        waited = .zero
        waitingSince = nil
        if readAsked { startWaiting(context) }
    }

    /// A wait starts. The timer is not cancelled when a wait stops, nor set anew for every
    /// wait: scheduling and cancelling a task for each request was 0.6 to 0.9 % of the server's
    /// CPU per single-report request (docs/performance.md). A timer already set is
    /// due no later than this wait's deadline (a deadline set earlier in the same request had
    /// at most the time waited since then less to go; one set in an earlier request was due at
    /// most the whole timeout after a moment before this one), so it fires in time and then
    /// sets itself again for what is left (``timerFired(_:)``).
    private func startWaiting(_ context: ChannelHandlerContext) {
        guard readingRequest, !finished, waitingSince == nil else { return }
        let now = NIODeadline.now()
        waitingSince = now
        if timer == nil { setTimer(context, at: now + max(.zero, timeout - waited)) }
    }

    private func setTimer(_ context: ChannelHandlerContext, at deadline: NIODeadline) {
        timer = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(deadline: deadline) {
            self.timer = nil
            self.timerFired(context)
        }
    }

    /// Times the request out when the server has now waited the whole timeout for it; sets
    /// the timer again for the rest while it waits, and leaves it unset when it does not.
    private func timerFired(_ context: ChannelHandlerContext) {
        guard let since = waitingSince else { return }
        let deadline = since + max(.zero, timeout - waited)
        if deadline > .now() {
            setTimer(context, at: deadline)
            return
        }
        timedOut(context)
    }

    private func stopWaiting() {
        guard let since = waitingSince else { return }
        waited = waited + (.now() - since)
        waitingSince = nil
    }

    /// The server asks for bytes: from now on it waits for the client.
    func read(context: ChannelHandlerContext) {
        readAsked = true
        startWaiting(context)
        context.read()
    }

    /// A read is done; unless the server asks for the next one, it is busy, not waiting.
    func channelReadComplete(context: ChannelHandlerContext) {
        readAsked = false
        stopWaiting()
        context.fireChannelReadComplete()
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
        lingerTimer?.cancel()
        lingerTimer = nil
        if counted {
            counted = false
            counter.decrement()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if lingering {
            // The rest of an answered request: once it has all arrived nothing is left unread.
            if case .end = part { context.close(promise: nil) }
            return
        }
        if finished { return }
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
            // Normally running since the request's first byte (`bytesArrived`); a pipelined
            // request's bytes came while the one before was still open.
            if !readingRequest { startRequest(context) }
            headSeen = true
        case .body:
            break
        case .end:
            endsRead += 1
            stopWaiting()
            readingRequest = false
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var response):
            responseStarted = true
            // The request this answers (number responsesEnded + 1) is still arriving.
            if !finished, endsRead <= responsesEnded {
                answeringEarly = true
                response.headerFields[.connection] = "close"
                context.write(wrapOutboundOut(.head(response)), promise: promise)
                return
            }
        case .body: break
        case .end:
            responsesEnded += 1
            responseStarted = false
            if answeringEarly, !finished {
                finished = true
                let written = context.eventLoop.makePromise(of: Void.self)
                written.futureResult.cascade(to: promise)
                context.write(data, promise: written)
                written.futureResult.assumeIsolatedUnsafeUnchecked().whenComplete { _ in
                    self.linger(context)
                }
                return
            }
        }
        context.write(data, promise: promise)
    }

    /// After an early answer: closes at once when the request has arrived meanwhile; else
    /// stops writing, discards input until the request ends, and closes after the linger.
    private func linger(_ context: ChannelHandlerContext) {
        stopWaiting()
        guard context.channel.isActive else { return }
        if endsRead >= responsesEnded {
            context.close(promise: nil)
            return
        }
        lingering = true
        let halfClosed = context.eventLoop.makePromise(of: Void.self)
        context.close(mode: .output, promise: halfClosed)
        halfClosed.futureResult.assumeIsolatedUnsafeUnchecked().whenFailure { _ in context.close(promise: nil) }
        lingerTimer = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(
            in: .milliseconds(Int64(limits.lingerSeconds * 1000))
        ) {
            self.lingerTimer = nil
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A request that is not HTTP gets the JSON error every other refusal has, when no
        // response has started (else NIO's bare 400 without a body, or just the close).
        if let parse = error as? HTTPParserError, !finished, responsesEnded == headsRead, !responseStarted {
            if parse == .headerOverflow {
                respond(
                    context, status: .requestHeaderFieldsTooLarge, retryAfter: nil,
                    message: "request headers are over the \(limits.maxHeaderBytes / 1024) KiB limit")
            } else {
                respond(context, status: .badRequest, retryAfter: nil, message: Self.describe(parse))
            }
            return
        }
        context.fireErrorCaught(error)
    }

    /// The refusal's text for a request NIO's parser could not read.
    private static func describe(_ error: HTTPParserError) -> String {
        switch error {
        case .invalidContentLength, .unexpectedContentLength: "Content-Length: not a valid length"
        case .invalidChunkSize: "chunked body: not a valid chunk size"
        default: "not a valid HTTP/1.1 request (\(error))"
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
                message: "request not received within the \(Self.seconds(limits.readTimeout.inSeconds)) s read timeout")
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
