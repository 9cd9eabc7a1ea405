import DequeModule
import Foundation
import Logging
import NIOPosix
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

/// What one `llvm-symbolizer` process may use, set on it before it reads its first request:
/// CPU seconds over its life (`RLIMIT_CPU`; the pool retires a process past half of it, so
/// the limit only ends one that spins), address space (`RLIMIT_AS`: it maps the debug files
/// it reads), the size of any file it writes (`RLIMIT_FSIZE`, 0: it has none to write) and
/// no core dumps.
public struct SymbolizerLimits: Sendable, Equatable {
    public var cpuSeconds: UInt64
    public var addressSpaceBytes: UInt64
    public var fileSizeBytes: UInt64

    public init(cpuSeconds: UInt64 = 600, addressSpaceBytes: UInt64 = 4 << 30, fileSizeBytes: UInt64 = 0) {
        self.cpuSeconds = cpuSeconds
        self.addressSpaceBytes = addressSpaceBytes
        self.fileSizeBytes = fileSizeBytes
    }
}

/// A bounded pool of long-running `llvm-symbolizer` processes, speaking its stdin/stdout
/// protocol: one `CODE "<file>" 0x<address>` line in, one JSON line out
/// (`--inlining --output-style=JSON`). A process is started on first need, reused, and
/// replaced when it dies, does not answer within `timeout` (it is killed then) or has used
/// half of its CPU limit. At most `size` processes run; callers beyond that wait (at most
/// `maxWaiting` of them, then ``SymbolizerError/busy``). A service: on graceful shutdown
/// every process ends.
///
/// Each process runs with an empty environment (none of the server's settings, database URL
/// or session secret), in a directory of its own, under ``SymbolizerLimits``, and with every
/// lookup of other files pointed at an empty directory (`--debug-file-directory`,
/// `--fallback-debug-path`, `--dwp`; `--no-debuginfod` where the symbolizer has it). The
/// files it is given are the server's own copies, which name no other file
/// (``DebugFileCache``).
public actor SymbolizerPool: Service {
    public let executable: String
    public let size: Int
    public let timeout: Duration
    public let maxWaiting: Int
    public let limits: SymbolizerLimits
    private var debuginfodFlag: [String]?
    private let logger: Logger
    private var idle: [SymbolizerProcess] = []
    private var running = 0
    private var waiters: Deque<CheckedContinuation<SymbolizerProcess, any Error>> = []
    private var closed = false

    public init(
        executable: String = "/usr/bin/llvm-symbolizer", size: Int = 2, timeout: Duration = .seconds(10),
        maxWaiting: Int = 256, limits: SymbolizerLimits = SymbolizerLimits(), logger: Logger
    ) {
        self.executable = executable
        self.size = max(1, size)
        self.timeout = timeout
        self.maxWaiting = maxWaiting
        self.limits = limits
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
        if debuginfodFlag == nil {
            let executable = self.executable
            let flag = (try? await NIOThreadPool.singleton.runIfActive { SymbolizerProcess.debuginfodFlag(executable: executable) }) ?? []
            if debuginfodFlag == nil { debuginfodFlag = flag }
            if let process = idle.popLast() { return process }
        }
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
        if process.isAlive, process.cpuSeconds() * 2 >= limits.cpuSeconds {
            logger.info("llvm-symbolizer retired after half of its CPU limit", metadata: ["pid": "\(process.pid)"])
            process.terminate()
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
        let process = try SymbolizerProcess(executable: executable, limits: limits, extraArguments: debuginfodFlag ?? [])
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
/// its blocking pipe I/O runs on its own serial queue (answers read) and a writer thread
/// (requests written at the same time), never on a Swift concurrency thread.
final class SymbolizerProcess: @unchecked Sendable {
    private let process: Process
    private let input: FileHandle
    private let output: Int32
    private let queue = DispatchQueue(label: "llvm-symbolizer")
    private let writer = DispatchQueue(label: "llvm-symbolizer-requests")
    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private var bufferStart = 0
    private var dead = false
    /// The process's own directory: its working directory, and the empty directory every
    /// lookup of another file is pointed at.
    let directory: URL

    var pid: Int32 { process.processIdentifier }
    var isAlive: Bool { lock.withLock { !dead } && process.isRunning }

    init(executable: String, limits: SymbolizerLimits, extraArguments: [String] = []) throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw SymbolizerError.unavailable("\(executable) not found (Debian: apt-get install llvm)")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-symbolizer-\(UUID().uuidString)")
        let empty = directory.appendingPathComponent("empty")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments =
            [
                "--inlining", "--output-style=JSON", "--demangle", "--functions=linkage",
                "--debug-file-directory=\(empty.path)", "--fallback-debug-path=\(empty.path)", "--dwp=\(empty.path)/none.dwp",
            ] + extraArguments
        process.environment = [:]
        process.currentDirectoryURL = directory
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        input = stdin.fileHandleForWriting
        output = stdout.fileHandleForReading.fileDescriptor
        _stdout = stdout
        do {
            try process.run()
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        // Before its first request: until then it reads nothing but its own arguments.
        let pid = process.processIdentifier
        let applied = [
            Self.limit(pid, RLIMIT_CPU, limits.cpuSeconds), Self.limit(pid, RLIMIT_AS, limits.addressSpaceBytes),
            Self.limit(pid, RLIMIT_FSIZE, limits.fileSizeBytes), Self.limit(pid, RLIMIT_CORE, 0),
        ]
        guard applied.allSatisfy({ $0 }) else {
            terminate()
            throw SymbolizerError.unavailable("cannot set the limits of llvm-symbolizer (errno \(errno))")
        }
    }

    private static func limit(_ pid: pid_t, _ resource: __rlimit_resource, _ value: UInt64) -> Bool {
        guard let prlimit = Self.prlimit else { return false }
        var limit = rlimit(rlim_cur: rlim_t(value), rlim_max: rlim_t(value))
        return prlimit(pid, Int32(resource.rawValue), &limit, nil) == 0
    }

    /// glibc's `prlimit(2)` wrapper, which Swift's Glibc module does not declare (it needs
    /// `_GNU_SOURCE`): it sets the limits of another process, here the child just started.
    /// (`posix_spawn`, which `Process` uses, cannot set limits in the child.)
    private static let prlimit: (@convention(c) (pid_t, Int32, UnsafePointer<rlimit>?, UnsafeMutablePointer<rlimit>?) -> Int32)? = {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "prlimit") else { return nil }
        return unsafeBitCast(
            symbol, to: (@convention(c) (pid_t, Int32, UnsafePointer<rlimit>?, UnsafeMutablePointer<rlimit>?) -> Int32).self)
    }()

    /// `--no-debuginfod` when the symbolizer has that flag (LLVM 15 and later); none otherwise
    /// (LLVM 14 has no flag: the copies it reads have no build id to look up). Read from its
    /// `--help`, which gets 5 s (blocking: run it off the cooperative pool).
    static func debuginfodFlag(executable: String) -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--help"]
        process.environment = [:]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return [] }
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 5, execute: watchdog)
        let help = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        return String(decoding: help, as: UTF8.self).contains("--no-debuginfod") ? ["--no-debuginfod"] : []
    }

    /// CPU seconds the process has used (user plus system), from `/proc/<pid>/stat`; 0 when unknown.
    func cpuSeconds() -> UInt64 {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3; utime and stime are fields 14 and 15.
        guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return 0 }
        let ticks = UInt64(max(1, sysconf(Int32(_SC_CLK_TCK))))
        return (user + system) / ticks
    }

    /// Kept so the read end stays open for the process's life.
    private let _stdout: Pipe

    deinit {
        terminate()
        try? FileManager.default.removeItem(at: directory)
    }

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
        var text = ""
        for address in addresses { text += "CODE \"\(file)\" 0x\(String(address, radix: 16))\n" }
        let request = Data(text.utf8)
        // Written while the answers are read: a request larger than the pipe's buffer would
        // otherwise wait for a reader that waits for it.
        let written = DispatchSemaphore(value: 0)
        let failed = Finished()
        writer.async { [self] in
            do {
                try input.write(contentsOf: request)
            } catch {
                _ = failed.set()
                terminate()
            }
            written.signal()
        }
        defer { written.wait() }
        var results: [[SymbolizedLocation]] = []
        results.reserveCapacity(addresses.count)
        for _ in addresses {
            guard let line = try readLine() else {
                terminate()
                throw SymbolizerError.died
            }
            results.append(Self.parse(line))
        }
        return results
    }

    private func readLine() throws -> ArraySlice<UInt8>? {
        while true {
            if let newline = buffer[bufferStart...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[bufferStart..<newline]
                bufferStart = newline + 1
                return line
            }
            if bufferStart > 0 {
                buffer.removeFirst(bufferStart)
                bufferStart = 0
            }
            guard buffer.count <= 16 << 20 else { return nil }  // no answer is 16 MiB
            let count = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 65536) { chunk in
                while true {
                    let count = read(output, chunk.baseAddress, chunk.count)
                    if count < 0, errno == EINTR { continue }
                    if count > 0 { buffer.append(contentsOf: chunk[..<count]) }
                    return count
                }
            }
            guard count > 0 else { return nil }
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
    static func parse(_ line: some Collection<UInt8>) -> [SymbolizedLocation] {
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
