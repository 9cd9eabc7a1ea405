import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// A small SMTP client (RFC 5321) over SwiftNIO: one connection per message, `EHLO`,
/// `STARTTLS` whenever offered (or TLS from the first byte for `smtps`), `AUTH PLAIN` or
/// `LOGIN` when the URL has credentials, then `MAIL FROM`, `RCPT TO` and `DATA` with
/// dot-stuffing.
///
/// Hostile or broken servers cost bounded time and memory: the whole attempt, connection to
/// the last reply, has one deadline (``timeout``) after which the connection is closed; a
/// reply line longer than ``maxLineBytes`` or a reply of more than ``maxReplyLines`` lines ends
/// the attempt at once. Certificates are verified (the system's trust store, plus the
/// configured CA file); a failed handshake is a failed attempt, never a fall-back to plain
/// text; credentials go only over TLS, or to a loopback host. Bytes a server sends after its
/// `STARTTLS` reply and before the handshake end the attempt: read as replies inside TLS, they
/// would let a machine in the middle answer for the server (RFC 3207, section 6).
struct SMTPClient: Sendable {
    let server: SMTPServer
    let timeout: Duration
    /// The name `EHLO` gives: the host of the server's public URL.
    let heloName: String
    let eventLoopGroup: any EventLoopGroup
    private let tls: NIOSSLContext

    /// RFC 5321 allows 512 bytes per reply line; four times that is generous for real servers.
    static let maxLineBytes = 2048
    /// Lines of one reply (an `EHLO` answer has one per extension).
    static let maxReplyLines = 64

    /// `caFile`: PEM certificates trusted besides the system's (empty: none).
    init(
        server: SMTPServer, timeout: Duration, heloName: String, caFile: String = "",
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        self.server = server
        self.timeout = timeout
        self.heloName = heloName.isEmpty ? "localhost" : heloName
        self.eventLoopGroup = eventLoopGroup
        var configuration = TLSConfiguration.makeClientConfiguration()
        if !caFile.isEmpty { configuration.additionalTrustRoots = [.file(caFile)] }
        tls = try NIOSSLContext(configuration: configuration)
    }

    /// Sends `message` (headers and body, lines ending in CRLF) from `from` to the one address
    /// `to`; returns once the server has accepted it (250 after the data).
    func send(from: String, to: String, message: [UInt8]) async throws(SMTPError) {
        let deadline = NIODeadline.now() + TimeAmount(timeout)
        do {
            let received = SMTPLineDecoder.Received()
            let channel = try await connect(received)
            // The attempt's one deadline: closing the channel ends every read and write.
            let closer = channel.channel.eventLoop.scheduleTask(deadline: deadline) { channel.channel.close(promise: nil) }
            defer { closer.cancel() }
            try await channel.executeThenClose { inbound, outbound in
                var session = Session(replies: inbound.makeAsyncIterator(), outbound: outbound)
                try await converse(&session, channel: channel.channel, received: received, from: from, to: to, message: message)
            }
        } catch {
            if NIODeadline.now() >= deadline { throw SMTPError(.timeout) }
            throw SMTPError.from(error)
        }
    }

    private func connect(_ received: SMTPLineDecoder.Received) async throws -> NIOAsyncChannel<ByteBuffer, ByteBuffer> {
        let implicitTLS = server.security == .implicitTLS
        let tls = tls
        let hostname = server.hostIsAddress ? nil : server.host
        return try await ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(TimeAmount(timeout))
            .connect(host: server.host, port: server.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if implicitTLS {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: hostname))
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(SMTPLineDecoder(maxLineBytes: Self.maxLineBytes, received: received)))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// The dialogue, greeting to the accepted message.
    private func converse(
        _ session: inout Session, channel: any Channel, received: SMTPLineDecoder.Received, from: String, to: String,
        message: [UInt8]
    ) async throws {
        try await session.expect(.greeting, 220)
        var extensions = try await session.command("EHLO \(heloName)", .hello, 250)
        var secure = server.security == .implicitTLS
        if !secure, extensions.offers("STARTTLS") {
            try await session.command("STARTTLS", .startTLS, 220)
            let tls = tls
            let hostname = server.hostIsAddress ? nil : server.host
            let read = session.linesRead
            try await channel.eventLoop.submit {
                // Whatever came after the 220 came in plain text (on the event loop, so nothing
                // arrives between this check and the TLS handler).
                guard received.isDrained(linesRead: read) else { throw SMTPError(.plainTextAfterSTARTTLS) }
                try channel.pipeline.syncOperations.addHandler(
                    NIOSSLClientHandler(context: tls, serverHostname: hostname), position: .first)
            }.get()
            secure = true
            do {
                extensions = try await session.command("EHLO \(heloName)", .hello, 250)
            } catch let error as SMTPError where error.replyCode != nil {
                throw error
            } catch {
                // The first exchange after STARTTLS is the handshake's: whatever ends it failed TLS.
                throw SMTPError(.tls)
            }
        }
        if let user = server.user {
            guard secure || server.allowsPlainCredentials else { throw SMTPError(.credentialsWithoutTLS) }
            let password = server.password ?? ""
            let mechanisms = extensions.authMechanisms
            if mechanisms.contains("PLAIN") {
                let token = Data(([0] + Array(user.utf8) + [0] + Array(password.utf8))).base64EncodedString()
                try await session.command("AUTH PLAIN \(token)", .authentication, 235)
            } else if mechanisms.contains("LOGIN") {
                try await session.command("AUTH LOGIN", .authentication, 334)
                try await session.command(Data(user.utf8).base64EncodedString(), .authentication, 334)
                try await session.command(Data(password.utf8).base64EncodedString(), .authentication, 235)
            } else {
                throw SMTPError(.noAuthMechanism)
            }
        }
        try await session.command("MAIL FROM:<\(from)>", .sender, 250)
        try await session.command("RCPT TO:<\(to)>", .recipient, 250, 251)
        try await session.command("DATA", .message, 354)
        try await session.outbound.write(ByteBuffer(bytes: Self.dataBlock(message)))
        try await session.expect(.message, 250)
        // Accepted: a QUIT that goes unanswered changes nothing.
        _ = try? await session.command("QUIT", .quit, 221)
    }

    /// `message` as the `DATA` block: every line ending in CRLF (a lone CR or LF becomes
    /// one), a line that starts with `.` gets one more (RFC 5321 4.5.2), then `.` alone.
    static func dataBlock(_ message: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.count + message.count / 64 + 8)
        var atLineStart = true
        var i = 0
        while i < message.count {
            let byte = message[i]
            if byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n") {
                if byte == UInt8(ascii: "\r"), i + 1 < message.count, message[i + 1] == UInt8(ascii: "\n") { i += 1 }
                out += [UInt8(ascii: "\r"), UInt8(ascii: "\n")]
                atLineStart = true
            } else {
                if atLineStart && byte == UInt8(ascii: ".") { out.append(UInt8(ascii: ".")) }
                out.append(byte)
                atLineStart = false
            }
            i += 1
        }
        if !atLineStart { out += [UInt8(ascii: "\r"), UInt8(ascii: "\n")] }
        out += Array(".\r\n".utf8)
        return out
    }

    /// One connection's replies and writes.
    private struct Session {
        var replies: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
        let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
        /// Lines taken from `replies` so far.
        var linesRead = 0

        /// Sends one command line and reads its reply, which must have one of `codes`.
        @discardableResult
        mutating func command(_ line: String, _ stage: SMTPError.Stage, _ codes: Int...) async throws -> SMTPReply {
            try await outbound.write(ByteBuffer(string: line + "\r\n"))
            return try await expect(stage, codes)
        }

        @discardableResult
        mutating func expect(_ stage: SMTPError.Stage, _ codes: Int...) async throws -> SMTPReply {
            try await expect(stage, codes)
        }

        mutating func expect(_ stage: SMTPError.Stage, _ codes: [Int]) async throws -> SMTPReply {
            let reply = try await next()
            guard codes.contains(reply.code) else { throw SMTPError(.refused(stage, reply.code, reply.lines.first ?? "")) }
            return reply
        }

        /// One whole reply: lines `NNN-text` up to the last, `NNN text`.
        mutating func next() async throws -> SMTPReply {
            var lines: [String] = []
            while true {
                guard let line = try await replies.next() else { throw SMTPError(.closed) }
                linesRead += 1
                let bytes = line.readableBytesView
                guard bytes.count >= 3, bytes.prefix(3).allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                    bytes.count == 3 || bytes[bytes.startIndex + 3] == UInt8(ascii: " ")
                        || bytes[bytes.startIndex + 3] == UInt8(ascii: "-"),
                    lines.count < SMTPClient.maxReplyLines
                else { throw SMTPError(.badReply) }
                let code = bytes.prefix(3).reduce(0) { $0 * 10 + Int($1 - 0x30) }
                lines.append(String(decoding: bytes.dropFirst(4), as: UTF8.self))
                if bytes.count == 3 || bytes[bytes.startIndex + 3] == UInt8(ascii: " ") {
                    return SMTPReply(code: code, lines: lines)
                }
            }
        }
    }
}

/// A server's reply: its code and the text of each line.
struct SMTPReply: Sendable {
    var code: Int
    var lines: [String]

    /// Whether an `EHLO` reply names `keyword` among its extensions.
    func offers(_ keyword: String) -> Bool {
        lines.dropFirst().contains { $0.split(separator: " ").first?.uppercased() == keyword }
    }

    /// The mechanisms of an `EHLO` reply's `AUTH` line, uppercased.
    var authMechanisms: Set<String> {
        var out = Set<String>()
        for line in lines.dropFirst() {
            let words = line.split(separator: " ").map { $0.uppercased() }
            if words.first == "AUTH" { out.formUnion(words.dropFirst()) }
        }
        return out
    }
}

/// Splits the server's bytes into lines (without CR LF); a line longer than `maxLineBytes`
/// is an error at once, so a line that never ends costs at most that many bytes.
struct SMTPLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    let maxLineBytes: Int
    let received: Received

    /// What the decoder has taken from the connection: lines passed on, and bytes of a line not
    /// ended yet. Written and read on the channel's event loop.
    final class Received: Sendable {
        private let state = NIOLockedValueBox((lines: 0, pending: 0))

        fileprivate func passed(pending: Int, lines: Int = 0) {
            state.withLockedValue { $0 = ($0.lines + lines, pending) }
        }

        /// Whether every line passed on was read (`linesRead`) and no part of another waits.
        func isDrained(linesRead: Int) -> Bool {
            state.withLockedValue { $0.lines == linesRead && $0.pending == 0 }
        }
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            guard buffer.readableBytes <= maxLineBytes else { throw SMTPError(.replyTooLong) }
            received.passed(pending: buffer.readableBytes)
            return .needMoreData
        }
        let length = newline - buffer.readerIndex
        guard length <= maxLineBytes else { throw SMTPError(.replyTooLong) }
        var line = buffer.readSlice(length: length + 1)!
        line.moveWriterIndex(to: line.writerIndex - 1)
        if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
        received.passed(pending: buffer.readableBytes, lines: 1)
        context.fireChannelRead(wrapInboundOut(line))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}

/// Why an SMTP attempt failed. ``isPermanent`` when the server refused the recipient or the
/// message with a 5xx reply: sending it again would be refused again. Everything else
/// (timeouts, connection and TLS errors, 4xx replies, a 5xx before the recipient) may pass.
struct SMTPError: Error, CustomStringConvertible, Equatable {
    /// Where in the dialogue a reply refused.
    enum Stage: String, Sendable {
        case greeting, hello = "EHLO", startTLS = "STARTTLS", authentication = "AUTH", sender = "MAIL FROM",
            recipient = "RCPT TO", message = "DATA", quit = "QUIT"
    }

    fileprivate enum Code: Equatable {
        case timeout, connection, tls, plainTextAfterSTARTTLS, closed, badReply, replyTooLong, credentialsWithoutTLS
        case noAuthMechanism
        case refused(Stage, Int, String)
    }

    private let code: Code

    fileprivate init(_ code: Code) { self.code = code }

    /// The reply code of a refusal; nil for other failures.
    var replyCode: Int? {
        if case .refused(_, let reply, _) = code { return reply }
        return nil
    }

    var isPermanent: Bool {
        guard case .refused(let stage, let reply, _) = code else { return false }
        return reply >= 500 && (stage == .recipient || stage == .message)
    }

    var description: String {
        switch code {
        case .timeout: "timeout"
        case .connection: "connection failed"
        case .tls: "TLS handshake or certificate failed"
        case .plainTextAfterSTARTTLS: "server sent data after its STARTTLS reply, before TLS"
        case .closed: "server closed the connection"
        case .badReply: "not an SMTP reply"
        case .replyTooLong: "reply too long"
        case .credentialsWithoutTLS: "server offers no STARTTLS; credentials are sent only over TLS"
        case .noAuthMechanism: "server offers neither AUTH PLAIN nor LOGIN"
        case .refused(let stage, let reply, let text):
            "\(stage.rawValue): \(reply) \(String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7f }.prefix(200)))"
        }
    }

    /// Any error of an attempt as one of these.
    static func from(_ error: any Error) -> SMTPError {
        if let error = error as? SMTPError { return error }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError { return SMTPError(.tls) }
        if let error = error as? ByteToMessageDecoderError, case .dataReceivedInErrorState(let inner, _) = error {
            return from(inner)
        }
        return SMTPError(.connection)
    }
}
