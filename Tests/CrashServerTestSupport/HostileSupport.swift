import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore

@testable import CrashServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs `body` against the full application on a real socket (127.0.0.1, free port),
/// for what router mode cannot show: header limits, read timeouts, connection handling.
func hostileLiveApp(
    _ config: ServerConfiguration = TestEnvironment.configuration(),
    _ body: @escaping @Sendable (any TestClientProtocol, Int) async throws -> Void
) async throws {
    let app = try await buildApplication(configuration: config, logger: TestEnvironment.logger)
    try await app.test(.live) { client in
        let port = try requireLivePort(client.port)
        try await body(client, port)
    }
}

private func requireLivePort(_ port: Int?) throws -> Int {
    guard let port else { throw TestFailure("live test client has no port") }
    return port
}

/// A blocking TCP connection to 127.0.0.1 with raw bytes in and out: for clients that
/// misbehave on purpose (slow bodies, huge headers). Every call is bounded in time.
final class HostileSocket: @unchecked Sendable {
    private let fd: Int32

    init(port: Int) throws {
        #if canImport(Glibc)
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw TestFailure("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw TestFailure("connect: errno \(errno)")
        }
        // A send to a server that stopped reading without closing ends after 30 s (false).
        var limit = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// Sends all of `bytes`; false once the peer has closed or reset.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool { sendAll(fd, bytes) }

    func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// Reads until the peer closes or `timeout` seconds pass; `closed` tells which.
    /// Polls without blocking and sleeps between polls, so it never holds one of the few
    /// cooperative threads the servers under test need to answer.
    func readUntilClosed(timeout: Double) async -> (bytes: [UInt8], closed: Bool) {
        let deadline = Date().addingTimeInterval(timeout)
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return (out, false) }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 0)
            if ready < 0 { return (out, true) }
            if ready == 0 {
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return (out, true) }
            out += buffer[0..<n]
        }
    }

    /// Reads one whole response (head, and a body as long as its `Content-Length`); nil when
    /// none has arrived within `timeout` seconds. Leaves the connection open.
    func readResponse(timeout: Double) async -> HostileHTTPResponse? {
        let deadline = Date().addingTimeInterval(timeout)
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while deadline.timeIntervalSinceNow > 0 {
            if let response = HostileHTTPResponse(out),
                response.body.utf8.count >= response.headers["content-length"].flatMap({ Int($0) }) ?? 0
            {
                return response
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 0)
            if ready < 0 { return nil }
            if ready == 0 {
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return HostileHTTPResponse(out) }
            out += buffer[0..<n]
        }
        return nil
    }
}

/// Sends all of `bytes` on socket `fd`; false once the peer has closed or reset.
func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = bytes[offset...].withUnsafeBytes { buffer in
            #if canImport(Glibc)
            Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            #else
            Darwin.send(fd, buffer.baseAddress, buffer.count, 0)
            #endif
        }
        if n <= 0 { return false }
        offset += n
    }
    return true
}

/// Sends one request on a new connection and reads its response (nil: none within 10 s).
func hostileExchange(port: Int, head: String, body: [UInt8] = []) async throws -> HostileHTTPResponse? {
    let socket = try HostileSocket(port: port)
    guard socket.send(Array(head.utf8) + body) else { return nil }
    return await socket.readResponse(timeout: 10)
}

/// A parsed raw HTTP/1.1 response: status, lower-cased headers, body.
struct HostileHTTPResponse {
    var status: Int
    var headers: [String: String]
    var body: String

    init?(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let lines = text[..<split.lowerBound].split(separator: "\r\n", omittingEmptySubsequences: false)
        guard let first = lines.first else { return nil }
        let parts = first.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { return nil }
        self.status = status
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        self.headers = headers
        self.body = String(text[split.upperBound...])
    }

    /// `error` of a `{"error": "..."}` body.
    var errorMessage: String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else { return nil }
        return object["error"] as? String
    }
}

/// The head of a `POST /v1/reports` with the given extra header lines.
func hostileRequestHead(key: String, contentLength: Int?, encoding: String = "identity", extra: [String] = []) -> String {
    var lines = [
        "POST /v1/reports HTTP/1.1", "Host: 127.0.0.1", "X-Crash-Key: \(key)", "Content-Type: application/json",
        "Content-Encoding: \(encoding)",
    ]
    if let contentLength { lines.append("Content-Length: \(contentLength)") } else { lines.append("Transfer-Encoding: chunked") }
    lines += extra
    return lines.joined(separator: "\r\n") + "\r\n\r\n"
}

/// Resident set size of this process in bytes, from /proc (0 where there is none); `field`
/// names another `kB` line of `/proc/self/status`, such as `RssAnon:`.
func hostileResidentBytes(field: String = "VmRSS:") -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix(field) {
        let kb = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return kb * 1024
    }
    return 0
}

/// JSON of a response body as a dictionary.
func hostileJSON(_ buffer: ByteBuffer) -> [String: Any]? {
    try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView)) as? [String: Any]
}
