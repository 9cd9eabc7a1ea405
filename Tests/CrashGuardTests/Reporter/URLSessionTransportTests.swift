import CrashCompression
import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("URLSessionTransport against a real HTTP listener on 127.0.0.1")
struct URLSessionTransportTests {
    @Test("the reporter's uploads arrive as a gzip POST with the key, and a 202 empties the queue")
    func uploadsOverHTTP() async throws {
        let server = try TinyHTTPServer { _, body in
            let json = try? Inflater.inflate(Array(body), format: .gzip, maxOutputBytes: 1 << 24)
            let count = json.flatMap { try? JSONDecoder.crashWire().decode(ReportBatch.self, from: Data($0)) }?.reports.count ?? 0
            return (202, [:], #"{"accepted":\#(count),"duplicates":0,"rejected":[]}"#)
        }
        defer { server.close() }
        var config = reporterTestConfiguration(directory: reporterTestDirectory())
        config.serverURL = URL(string: "http://127.0.0.1:\(server.port)")!
        config.transport = URLSessionTransport(timeout: 10)
        let reporter = try Reporter(configuration: config, device: config.device)
        for i in 0..<3 { reporter.record(reporterEvent("over http \(i)", timestamp: Date())) }
        #expect(await reporter.flush(timeout: .seconds(20)))

        let request = try #require(server.requests.first)
        #expect(request.head.hasPrefix("POST /v1/reports HTTP/1.1"))
        #expect(request.header("x-crash-key") == "ik_test")
        #expect(request.header("content-encoding") == "gzip")
        #expect(request.header("content-type") == "application/json")
        let json = try Inflater.inflate(Array(request.body), format: .gzip, maxOutputBytes: 1 << 24)
        let batch = try JSONDecoder.crashWire().decode(ReportBatch.self, from: Data(json))
        #expect(batch.reports.map(\.reason) == ["over http 0", "over http 1", "over http 2"])
        #expect(reporter.queue?.count == 0)
    }

    @Test("status, headers and body come back as sent; a closed port is a thrown error")
    func statusAndErrors() async throws {
        let server = try TinyHTTPServer { _, _ in (503, ["Retry-After": "2"], #"{"error":"database unreachable"}"#) }
        let transport = URLSessionTransport(timeout: 10)
        let request = UploadRequest(
            url: URL(string: "http://127.0.0.1:\(server.port)/v1/reports")!,
            headers: ["X-Crash-Key": "k", "Content-Type": "application/json"], body: Data("{}".utf8))
        let response = try await transport.send(request)
        #expect(response.status == 503)
        #expect(response.headers["retry-after"] == "2")
        #expect(String(decoding: response.body, as: UTF8.self).contains("database unreachable"))
        server.close()

        var closed = request
        closed.url = URL(string: "http://127.0.0.1:\(server.port)/v1/reports")!
        await #expect(throws: (any Error).self) { _ = try await transport.send(closed) }
    }
}

/// A one-thread HTTP/1.1 listener on 127.0.0.1 with a kernel-chosen port: reads each
/// request (head and `Content-Length` body), answers with `respond`, closes the connection.
final class TinyHTTPServer: @unchecked Sendable {
    struct Request {
        var head: String
        var body: Data
        func header(_ name: String) -> String? {
            for line in head.split(separator: "\r\n").dropFirst() {
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2, parts[0].lowercased() == name.lowercased() {
                    return parts[1].trimmingCharacters(in: .whitespaces)
                }
            }
            return nil
        }
    }

    let port: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var received: [Request] = []
    private let respond: @Sendable (String, Data) -> (Int, [String: String], String)

    var requests: [Request] { lock.withLock { received } }

    init(respond: @escaping @Sendable (String, Data) -> (Int, [String: String], String)) throws {
        self.respond = respond
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            _ = Glibc_close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = UInt16(bigEndian: address.sin_port)
        self.listener = fd
        let thread = Thread { [self] in self.serve() }
        thread.start()
    }

    /// Stops listening; the serving thread closes the socket once its `accept` fails. Closing
    /// it here would free its number while that thread may still call `accept` with it, and the
    /// next server's socket, given the same number, would be served by this server's handler.
    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 && errno == EINTR { continue }
            if connection < 0 {
                _ = Glibc_close(listener)
                return
            }
            handle(connection)
            _ = Glibc_close(connection)
        }
    }

    private func handle(_ connection: Int32) {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var headEnd: Range<Data.Index>?
        var contentLength = 0
        while true {
            if headEnd == nil, let range = data.range(of: Data("\r\n\r\n".utf8)) {
                headEnd = range
                let head = String(decoding: data[..<range.lowerBound], as: UTF8.self)
                contentLength = Request(head: head, body: Data()).header("content-length").flatMap { Int($0) } ?? 0
            }
            if let headEnd, data.count - headEnd.upperBound >= contentLength { break }
            let n = recv(connection, &buffer, buffer.count, 0)
            if n <= 0 { return }
            data.append(contentsOf: buffer[..<n])
        }
        guard let headEnd else { return }
        let head = String(decoding: data[..<headEnd.lowerBound], as: UTF8.self)
        let body = Data(data[headEnd.upperBound...].prefix(contentLength))
        lock.withLock { received.append(Request(head: head, body: body)) }
        let (status, headers, text) = respond(head, body)
        var response = "HTTP/1.1 \(status) \(status == 202 ? "Accepted" : "Status")\r\n"
        response += "Content-Type: application/json\r\nContent-Length: \(text.utf8.count)\r\nConnection: close\r\n"
        for (name, value) in headers { response += "\(name): \(value)\r\n" }
        response += "\r\n" + text
        let bytes = Array(response.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
            sent += n
        }
    }
}

/// `close(2)`, named apart from the server's own `close()`.
private func Glibc_close(_ fd: Int32) -> Int32 {
    #if canImport(Glibc)
    return Glibc.close(fd)
    #else
    return Darwin.close(fd)
    #endif
}
