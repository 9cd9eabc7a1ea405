import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An SMTP server on 127.0.0.1 (an ephemeral port) that plays a script on its one
/// connection, for what a real server never does: a reply line that never ends, silence, a
/// `STARTTLS` that is followed by no TLS, refusals at a chosen step. A blocking thread of its
/// own serves it, so no step holds a cooperative thread. It records the lines the client
/// sent (anything up to a line feed, TLS records included) and whether the client closed.
final class ScriptedSMTPServer: Sendable {
    enum Step: Sendable {
        /// Sends these bytes.
        case send(String)
        /// Reads one line from the client.
        case read
        /// Reads lines up to and including one that is `.` alone (a `DATA` block).
        case readData
        /// Reads whatever bytes come next (a TLS handshake's first record, which need not hold a
        /// line feed), recording them as one line.
        case readBytes
        /// Sends `250-` and then bytes without a line end for as long as the client takes them.
        case endlessLine
        /// Reads lines until the client closes.
        case drain
    }

    /// What the connection saw, once the script has ended.
    struct Record: Sendable {
        /// The client's lines, without their line ends.
        var lines: [String] = []
        /// Whether the client closed (or reset) the connection before the script ended.
        var closedByClient = false
    }

    private struct State {
        var lines: [String] = []
        var record: Record?
    }

    let port: Int
    private let state = Mutex(State())
    /// The listening socket until the connection is accepted, then the connection; -1 once
    /// closed. Closed and shut down only under this lock, so ``stop()`` never shuts down a
    /// descriptor number that another test's socket has been given since.
    private let sockets: Mutex<(listener: Int32, connection: Int32)>

    /// Listens, and serves `steps` to the first connection.
    init(_ steps: [Step]) throws {
        let (listener, port) = try loopbackListener(backlog: 8)
        self.port = port
        sockets = Mutex((listener, -1))
        Thread.detachNewThread { [self] in serve(steps, listener) }
    }

    /// The `smtp://` URL of the server, with `credentials` (`user:password`) when given.
    func url(credentials: String? = nil) -> String {
        "smtp://\(credentials.map { $0 + "@" } ?? "")127.0.0.1:\(port)"
    }

    /// Waits for the script to end (the client closed, or every step was played); fails after
    /// `limit` (a client that never came or never closed).
    func finished(within limit: Duration = .seconds(30)) async throws -> Record {
        try await waitUntil("the SMTP script ends", within: limit) { state.withLock { $0.record != nil } }
        return try #require(state.withLock { $0.record })
    }

    /// Ends the script: the listening socket and the connection are shut down.
    func stop() {
        sockets.withLock { open in
            if open.listener >= 0 { shutdown(open.listener, Int32(SHUT_RDWR)) }
            if open.connection >= 0 { shutdown(open.connection, Int32(SHUT_RDWR)) }
        }
    }

    private func serve(_ steps: [Step], _ listener: Int32) {
        let fd = accept(listener, nil, nil)
        sockets.withLock { open in
            close(listener)
            open = (-1, fd)
        }
        var closed = fd < 0
        if fd >= 0 {
            var pending: [UInt8] = []
            for step in steps where !closed {
                switch step {
                case .send(let text): closed = !sendAll(fd, Array(text.utf8))
                case .read: closed = readLine(fd, &pending) == nil
                case .readData:
                    while !closed {
                        guard let line = readLine(fd, &pending) else {
                            closed = true
                            break
                        }
                        if line == "." { break }
                    }
                case .readBytes:
                    var buffer = [UInt8](repeating: 0, count: 16384)
                    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n > 0 {
                        let bytes = pending + buffer[0..<n]
                        pending = []
                        state.withLock { $0.lines.append(String(decoding: bytes, as: UTF8.self)) }
                    } else {
                        closed = true
                    }
                case .endlessLine:
                    let filler = [UInt8](repeating: UInt8(ascii: "x"), count: 4096)
                    closed = !sendAll(fd, Array("250-".utf8))
                    while !closed { closed = !sendAll(fd, filler) }
                case .drain:
                    while !closed { closed = readLine(fd, &pending) == nil }
                }
            }
            sockets.withLock { open in
                close(fd)
                open.connection = -1
            }
        }
        state.withLock { $0.record = Record(lines: $0.lines, closedByClient: closed) }
    }

    /// Reads one line (recorded); nil once the client has closed.
    private func readLine(_ fd: Int32, _ pending: inout [UInt8]) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                var bytes = pending[..<end]
                if bytes.last == UInt8(ascii: "\r") { bytes = bytes.dropLast() }
                let line = String(decoding: bytes, as: UTF8.self)
                pending.removeSubrange(...end)
                state.withLock { $0.lines.append(line) }
                return line
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 {
                if !pending.isEmpty {
                    let rest = String(decoding: pending, as: UTF8.self)
                    pending = []
                    state.withLock { $0.lines.append(rest) }
                }
                return nil
            }
            pending += buffer[0..<n]
        }
    }
}

/// A listening TCP socket on 127.0.0.1 with a port the kernel chose.
func loopbackListener(backlog: Int32) throws -> (fd: Int32, port: Int) {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
            bind(fd, raw, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, raw, &length) == 0
        }
    }
    guard bound else {
        let failure = errno
        close(fd)
        throw TestFailure("bind/listen on 127.0.0.1: errno \(failure)")
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}
