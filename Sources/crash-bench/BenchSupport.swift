import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO

/// Shared pieces of the benchmark commands: latency summaries, a one-off
/// PostgreSQL connection from a URL, running `crash-server project create`, and
/// sampling a process's RSS and CPU from /proc.
enum Bench {
    /// p50/p95/p99/max of a set of durations, in milliseconds.
    struct Latency {
        var p50 = 0.0, p95 = 0.0, p99 = 0.0, max = 0.0, mean = 0.0
        init(_ samples: [Double]) {
            guard !samples.isEmpty else { return }
            let sorted = samples.sorted()
            func pct(_ p: Double) -> Double {
                sorted[min(sorted.count - 1, Int((p * Double(sorted.count - 1)).rounded()))] * 1000
            }
            p50 = pct(0.50)
            p95 = pct(0.95)
            p99 = pct(0.99)
            max = sorted.last! * 1000
            mean = sorted.reduce(0, +) / Double(sorted.count) * 1000
        }
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
    }

    /// Runs `body` over `inputs` (after a warm-up of up to 100 calls) until `seconds` have
    /// passed; returns calls per second of this thread's CPU time (on a shared machine the wall
    /// clock also counts the time other processes held the core; the wall-clock rate is printed
    /// beside it). What `body` returns is summed so that its work cannot be optimized away.
    static func callsPerCPUSecond<Input>(_ inputs: [Input], seconds: Double, _ body: (Input) throws -> Int) rethrows -> Double {
        let clock = ContinuousClock()
        var sink = 0
        for input in inputs.prefix(100) { sink &+= try body(input) }  // warm up
        var calls = 0
        let start = clock.now
        let cpuStart = threadCPUSeconds()
        let deadline = start + .milliseconds(Int(seconds * 1000))
        var now = start
        while now < deadline {
            for input in inputs {
                sink &+= try body(input)
            }
            calls += inputs.count
            now = clock.now
        }
        let cpu = threadCPUSeconds() - cpuStart
        let elapsed = now - start
        if sink == 42 { print("") }  // keeps the results alive
        let secondsElapsed = Bench.seconds(elapsed)
        print(String(format: "  (%d calls: wall %.2f s, %.0f/s; thread CPU %.2f s)", calls, secondsElapsed, Double(calls) / secondsElapsed, cpu))
        return Double(calls) / max(cpu, 1e-9)
    }

    /// CPU time of the calling thread, in seconds.
    static func threadCPUSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) * 1e-9
    }

    /// Runs `executable` to its end: its standard output and exit status. Standard error
    /// goes to ours, or nowhere when `quiet`.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, quiet: Bool = false
    ) throws -> (output: Data, status: Int32) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = Pipe()
        process.standardOutput = pipe
        if quiet { process.standardError = FileHandle.nullDevice }
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (data, process.terminationStatus)
    }

    /// A shell command's output, trimmed ("unknown" when it cannot be started).
    static func shell(_ command: String) -> String {
        guard let (data, _) = try? run("/bin/sh", ["-c", command], quiet: true) else { return "unknown" }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs `crash-server project create NAME` with `DATABASE_URL` set; returns its keys.
    static func createProject(serverBinary: String, databaseURL: String, name: String) throws -> (ingestKey: String, readToken: String) {
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = databaseURL
        let (data, status) = try run(serverBinary, ["project", "create", name, "--log-level", "error"], environment: env)
        guard status == 0,
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let ingest = object["ingestKey"] as? String, let read = object["readToken"] as? String
        else {
            throw BenchError("`\(serverBinary) project create \(name)` failed: \(String(decoding: data, as: UTF8.self))")
        }
        return (ingest, read)
    }

    /// A PostgreSQL connection from a `postgres://user[:password]@host[:port]/db` URL.
    static func connect(_ url: String, logger: Logger) async throws -> PostgresConnection {
        guard let components = URLComponents(string: url), let host = components.host else {
            throw BenchError("not a PostgreSQL URL: \(url)")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let config = PostgresConnection.Configuration(
            host: host, port: components.port ?? 5432, username: components.user ?? "postgres",
            password: components.password, database: database.isEmpty ? nil : database, tls: .disable)
        return try await PostgresConnection.connect(
            on: MultiThreadedEventLoopGroup.singleton.any(), configuration: config, id: Int.random(in: 1...1_000_000), logger: logger)
    }

    /// The first column of every row of `query`.
    static func values<T: PostgresDecodable & Sendable>(_ connection: PostgresConnection, _ query: PostgresQuery, as: T.Type) async throws -> [T] {
        var out: [T] = []
        for try await value in try await connection.query(query, logger: quietLogger).decode(T.self) { out.append(value) }
        return out
    }

    static var quietLogger: Logger {
        var logger = Logger(label: "crash-bench")
        logger.logLevel = .error
        return logger
    }

    /// CPU model, cores and memory of this machine, for the report.
    static func machine() -> String {
        let model = shell("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'")
        let memory = shell("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
        return "\(model.isEmpty ? shell("uname -m") : model), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(memory) RAM"
    }
}

/// Samples one process's resident memory and CPU time from /proc while a run lasts.
///
/// The peak is also read from the kernel's own mark (`VmHWM`), reset when sampling starts
/// (`/proc/PID/clear_refs`, allowed for one's own processes): a spike shorter than the
/// sampling interval, such as one refused bomb, is still seen.
final class ProcessSampler: @unchecked Sendable {
    private let pid: Int32
    private let lock = NSLock()
    private var peakRSS = 0
    /// Resident bytes when sampling started.
    let startRSS: Int
    private let highWaterReset: Bool
    private var startCPU = 0.0
    private var startMachine: (busy: Double, total: Double) = (0, 0)
    private var task: Task<Void, Never>?
    private let started = ContinuousClock.now

    init?(pid: Int32?) {
        guard let pid, pid > 0, Self.rssBytes(pid) != nil else { return nil }
        self.pid = pid
        startCPU = Self.cpuSeconds(pid) ?? 0
        startMachine = Self.machineTicks()
        highWaterReset = (try? "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)) != nil
        startRSS = Self.rssBytes(pid) ?? 0
        peakRSS = startRSS
        task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                guard let self, let rss = Self.rssBytes(self.pid) else { return }
                self.lock.withLock { self.peakRSS = max(self.peakRSS, rss) }
            }
        }
    }

    /// Peak RSS in bytes, the process's CPU use in percent of one core, and the machine's
    /// busy percentage (all cores) since `init`.
    func finish() -> (peakRSS: Int, cpuPercent: Double, machineBusy: Double) {
        task?.cancel()
        let elapsed = Bench.seconds(ContinuousClock.now - started)
        let cpu = (Self.cpuSeconds(pid) ?? startCPU) - startCPU
        let now = Self.machineTicks()
        let busy = (now.busy - startMachine.busy) / max(1, now.total - startMachine.total) * 100
        let highWater = highWaterReset ? Self.statusBytes(pid, "VmHWM:") ?? 0 : 0
        let rss = lock.withLock { max(peakRSS, highWater, Self.rssBytes(pid) ?? 0) }
        return (rss, cpu / max(elapsed, 0.001) * 100, busy)
    }

    static func rssBytes(_ pid: Int32) -> Int? { statusBytes(pid, "VmRSS:") }

    /// A `kB` field of /proc/PID/status, in bytes.
    static func statusBytes(_ pid: Int32, _ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field) {
            let kb = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return kb * 1024
        }
        return nil
    }

    /// utime + stime in seconds (fields 14 and 15 of /proc/PID/stat, after the command name).
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// CPU seconds of a process tree: `pid` with its reaped children (cutime, cstime) and its
    /// live children, e.g. a postmaster and its backends.
    static func treeCPUSeconds(_ pid: Int32) -> Double? {
        func fields(_ p: String) -> [Substring]? {
            guard let text = try? String(contentsOfFile: "/proc/\(p)/stat", encoding: .utf8),
                let close = text.lastIndex(of: ")")
            else { return nil }
            return text[text.index(after: close)...].split(separator: " ")
        }
        guard let root = fields(String(pid)), root.count > 15 else { return nil }
        let tick = Double(sysconf(Int32(_SC_CLK_TCK)))
        var total = (11...14).reduce(0.0) { $0 + (Double(root[$1]) ?? 0) }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for entry in entries where entry.first?.isNumber == true && entry != String(pid) {
            guard let f = fields(entry), f.count > 13, f[1] == Substring(String(pid)) else { continue }
            total += (Double(f[11]) ?? 0) + (Double(f[12]) ?? 0)
        }
        return total / tick
    }

    static func machineTicks() -> (busy: Double, total: Double) {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first
        else { return (0, 0) }
        let values = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard values.count >= 5 else { return (0, 0) }
        let total = values.reduce(0, +)
        let idle = values[3] + values[4]
        return (total - idle, total)
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Ranks 0..<n with P(k) proportional to 1/(k+1)^s, `s` chosen so rank 0 gets `hottest`.
struct Zipf {
    let cumulative: [Double]

    init(count n: Int, hottest: Double) {
        let n = max(1, n)
        func share(_ s: Double) -> Double {
            var total = 0.0
            for k in 1...n { total += 1 / pow(Double(k), s) }
            return 1 / total
        }
        var lo = 0.0, hi = 4.0
        if n > 1 {
            for _ in 0..<50 {
                let mid = (lo + hi) / 2
                if share(mid) < hottest { lo = mid } else { hi = mid }
            }
        }
        let s = (lo + hi) / 2
        var acc = 0.0
        var cumulative: [Double] = []
        cumulative.reserveCapacity(n)
        for k in 1...n {
            acc += 1 / pow(Double(k), s)
            cumulative.append(acc)
        }
        self.cumulative = cumulative.map { $0 / acc }
    }

    func sample(_ rng: inout some RandomNumberGenerator) -> Int {
        let u = Double.random(in: 0..<1, using: &rng)
        var lo = 0, hi = cumulative.count - 1
        while lo < hi {
            let mid = (lo + hi) / 2
            if cumulative[mid] < u { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
