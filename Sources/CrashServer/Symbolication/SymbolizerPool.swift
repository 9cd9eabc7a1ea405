import DequeModule
import Foundation
import Logging
import ServiceLifecycle

/// One source location `llvm-symbolizer` resolved an address to.
public struct SymbolizedLocation: Codable, Sendable, Equatable {
    /// The function, demangled (C++ by the symbolizer, Swift by the runtime's demangler).
    public var function: String?
    public var file: String?
    public var line: Int?
    public var column: Int?

    public init(function: String?, file: String?, line: Int?, column: Int?) {
        self.function = function
        self.file = file
        self.line = line
        self.column = column
    }
}

/// A bounded pool of long-running `llvm-symbolizer` processes, speaking its stdin/stdout
/// protocol: one `CODE "<file>" 0x<address>` line in, one JSON line out
/// (`--inlining --output-style=JSON`). A process is started on first need, reused, and
/// replaced when it dies or does not answer within `timeout` (it is killed then).
/// At most `size` processes run; callers beyond that wait (at most `maxWaiting` of them,
/// then ``SymbolizerError/busy``). A service: on graceful shutdown every process ends.
public actor SymbolizerPool: Service {
    public let executable: String
    public let size: Int
    public let timeout: Duration
    public let maxWaiting: Int
    private let logger: Logger
    private var idle: [SymbolizerProcess] = []
    private var running = 0
    private var waiters: Deque<CheckedContinuation<SymbolizerProcess, any Error>> = []
    private var closed = false

    public init(
        executable: String = "/usr/bin/llvm-symbolizer", size: Int = 2, timeout: Duration = .seconds(10),
        maxWaiting: Int = 256, logger: Logger
    ) {
        self.executable = executable
        self.size = max(1, size)
        self.timeout = timeout
        self.maxWaiting = maxWaiting
        self.logger = logger
        // A symbolizer that dies between our write and its read must not kill the server
        // with SIGPIPE: writes to its pipe then fail with EPIPE, and it is restarted.
        signal(SIGPIPE, SIG_IGN)
    }

    public func run() async throws {
        try? await gracefulShutdown()
        shutdown()
    }

    /// Ends every process and refuses further work.
    public func shutdown() {
        closed = true
        for process in idle { process.terminate() }
        idle.removeAll()
        while let waiter = waiters.popFirst() { waiter.resume(throwing: SymbolizerError.closed) }
    }

    /// Processes started and not yet ended (for tests and metrics).
    public var processCount: Int { running }

    /// The idle processes' ids (for tests).
    var idleProcessIDs: [Int32] { idle.map(\.pid) }

    /// Resolves each address of `file` (addresses as the file's DWARF uses them), in order:
    /// the innermost inlined location first, the real function last; empty when unknown.
    public func symbolize(file: String, addresses: [UInt64]) async throws -> [[SymbolizedLocation]] {
        let process = try await checkOut()
        let timeout = self.timeout
        do {
            let results = try await process.query(file: file, addresses: addresses, timeout: timeout)
            checkIn(process)
            return results
        } catch {
            checkIn(process)
            logger.warning(
                "llvm-symbolizer failed", metadata: ["error.message": "\(error)", "file": "\(file)"])
            throw error
        }
    }

    private func checkOut() async throws -> SymbolizerProcess {
        guard !closed else { throw SymbolizerError.closed }
        if let process = idle.popLast() { return process }
        if running < size { return try start() }
        guard waiters.count < maxWaiting else { throw SymbolizerError.busy }
        return try await withCheckedThrowingContinuation { waiters.append($0) }
    }

    private func checkIn(_ process: SymbolizerProcess) {
        if closed {
            process.terminate()
            running -= 1
            return
        }
        if process.isAlive {
            if let waiter = waiters.popFirst() { waiter.resume(returning: process) } else { idle.append(process) }
            return
        }
        running -= 1
        logger.info("llvm-symbolizer process ended; a new one starts on demand")
        if let waiter = waiters.popFirst() {
            do { waiter.resume(returning: try start()) } catch { waiter.resume(throwing: error) }
        }
    }

    private func start() throws -> SymbolizerProcess {
        let process = try SymbolizerProcess(executable: executable)
        running += 1
        logger.debug("llvm-symbolizer started", metadata: ["pid": "\(process.pid)"])
        return process
    }
}

/// Why a symbolization did not happen.
public struct SymbolizerError: Error, CustomStringConvertible, Equatable {
    private enum Code: Equatable { case closed, busy, timedOut, died, unavailable }
    private let code: Code
    private let detail: String
    public static let closed = SymbolizerError(code: .closed, detail: "the symbolizer pool is shut down")
    public static let busy = SymbolizerError(code: .busy, detail: "too many symbolizations waiting")
    public static let timedOut = SymbolizerError(code: .timedOut, detail: "llvm-symbolizer did not answer in time")
    public static let died = SymbolizerError(code: .died, detail: "llvm-symbolizer exited")
    static func unavailable(_ detail: String) -> SymbolizerError { SymbolizerError(code: .unavailable, detail: detail) }
    public var description: String { detail }
    public static func == (a: Self, b: Self) -> Bool { a.code == b.code }
}

/// One `llvm-symbolizer` process. Used by one caller at a time (the pool guarantees it);
/// its blocking pipe I/O runs on its own serial queue, never on a Swift concurrency thread.
final class SymbolizerProcess: @unchecked Sendable {
    private let process: Process
    private let input: FileHandle
    private let output: Int32
    private let queue = DispatchQueue(label: "llvm-symbolizer")
    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private var dead = false

    var pid: Int32 { process.processIdentifier }
    var isAlive: Bool { lock.withLock { !dead } && process.isRunning }

    init(executable: String) throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw SymbolizerError.unavailable("\(executable) not found (Debian: apt-get install llvm)")
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--inlining", "--output-style=JSON", "--demangle", "--functions=linkage"]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        input = stdin.fileHandleForWriting
        output = stdout.fileHandleForReading.fileDescriptor
        _stdout = stdout
    }

    /// Kept so the read end stays open for the process's life.
    private let _stdout: Pipe

    deinit { terminate() }

    func terminate() {
        lock.withLock { dead = true }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    func query(file: String, addresses: [UInt64], timeout: Duration) async throws -> [[SymbolizedLocation]] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                // A watchdog kills a process that hangs; the blocked read then sees EOF.
                let finished = Finished()
                let watchdog = DispatchWorkItem { [self] in
                    if finished.fire() { terminate() }
                }
                let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
                DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: watchdog)
                let result = Result { try self.blockingQuery(file: file, addresses: addresses) }
                let killed = !finished.set()
                watchdog.cancel()
                if killed, case .failure = result {
                    continuation.resume(throwing: SymbolizerError.timedOut)
                } else {
                    continuation.resume(with: result)
                }
            }
        }
    }

    /// Whichever comes first: the answer (``set()`` is `true`) or the watchdog (``fire()`` is `true`).
    private final class Finished: @unchecked Sendable {
        private let lock = NSLock()
        private var answered = false
        private var fired = false
        func set() -> Bool {
            lock.withLock {
                answered = true
                return !fired
            }
        }
        func fire() -> Bool {
            lock.withLock {
                if !answered { fired = true }
                return fired
            }
        }
    }

    private func blockingQuery(file: String, addresses: [UInt64]) throws -> [[SymbolizedLocation]] {
        // The file name is quoted; a quote or newline in it cannot be expressed, and the
        // server only passes the paths it wrote itself.
        guard !file.contains("\""), !file.contains("\n") else { return addresses.map { _ in [] } }
        var request = ""
        for address in addresses { request += "CODE \"\(file)\" 0x\(String(address, radix: 16))\n" }
        do {
            try input.write(contentsOf: Data(request.utf8))
        } catch {
            terminate()
            throw SymbolizerError.died
        }
        var results: [[SymbolizedLocation]] = []
        for _ in addresses {
            guard let line = try readLine() else {
                terminate()
                throw SymbolizerError.died
            }
            results.append(Self.parse(line))
        }
        return results
    }

    private func readLine() throws -> [UInt8]? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return nil }
            buffer.append(contentsOf: chunk[..<count])
            guard buffer.count <= 16 << 20 else { return nil }  // no answer is 16 MiB
        }
    }

    private struct Answer: Decodable {
        struct Symbol: Decodable {
            var FunctionName: String?
            var FileName: String?
            var Line: Int?
            var Column: Int?
        }
        var Symbol: [Symbol]?
    }

    /// One JSON answer line as locations (an `Error` answer, or `??`, is no location).
    static func parse(_ line: [UInt8]) -> [SymbolizedLocation] {
        guard let answer = try? JSONDecoder().decode(Answer.self, from: Data(line)) else { return [] }
        return (answer.Symbol ?? []).compactMap { symbol in
            let function = symbol.FunctionName.flatMap { $0.isEmpty || $0 == "??" ? nil : SwiftDemangler.demangle($0) }
            let file = symbol.FileName.flatMap { $0.isEmpty || $0 == "??" ? nil : $0 }
            let line = symbol.Line.flatMap { $0 > 0 ? $0 : nil }
            guard function != nil || file != nil else { return nil }
            return SymbolizedLocation(
                function: function, file: file, line: file == nil ? nil : line, column: symbol.Column.flatMap { $0 > 0 ? $0 : nil })
        }
    }
}

/// Swift symbols (`$s...`), which llvm-symbolizer leaves mangled, through the Swift
/// runtime's own demangler (the server is a Swift program: the runtime is loaded).
enum SwiftDemangler {
    @_silgen_name("swift_demangle")
    private static func swift_demangle(
        _ mangled: UnsafePointer<CChar>?, _ length: Int, _ output: UnsafeMutablePointer<CChar>?,
        _ outputLength: UnsafeMutablePointer<Int>?, _ flags: UInt32
    ) -> UnsafeMutablePointer<CChar>?

    static func demangle(_ name: String) -> String {
        guard name.hasPrefix("$s") || name.hasPrefix("_$s") || name.hasPrefix("$S") || name.hasPrefix("_T0") else { return name }
        let utf8 = Array(name.utf8CString)
        guard let result = utf8.withUnsafeBufferPointer({ swift_demangle($0.baseAddress, utf8.count - 1, nil, nil, 0) })
        else { return name }
        defer { free(result) }
        return String(cString: result)
    }
}
