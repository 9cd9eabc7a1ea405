import CrashCompression
import CrashWire
import Foundation

@testable import CrashGuard

/// A clock whose sleeps return at once, advancing `now` and remembering each duration.
final class ReporterTestClock: ReporterClock, @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    private var slept: [Duration] = []

    init(now: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = now }

    func advance(by seconds: TimeInterval) { lock.withLock { current += seconds } }

    var now: Date { lock.withLock { current } }
    var sleeps: [Duration] { lock.withLock { slept } }

    func sleep(for duration: Duration) async throws {
        try Task.checkCancellation()
        lock.withLock {
            slept.append(duration)
            current += duration.seconds
        }
        await Task.yield()
    }
}

/// A clock whose sleeps never end until their task is cancelled (an upload parked in backoff).
struct ParkedClock: ReporterClock {
    var now: Date
    func sleep(for duration: Duration) async throws {
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}

/// A scripted transport: `respond` gets each `/v1/reports` request and the reports in it
/// (decoded from the gzip body) and answers, or throws like a network error.
/// `/v1/sessions` requests are kept apart (``sessionUpdates``) and answered by
/// `respondSessions` (default: all accepted).
final class FakeTransport: ReportTransport, @unchecked Sendable {
    struct Sent {
        var request: UploadRequest
        var reports: [Report]
    }

    private let lock = NSLock()
    private var sent: [Sent] = []
    private var sessionsSent: [(request: UploadRequest, updates: [SessionUpdate])] = []
    private let respond: @Sendable (_ reports: [Report], _ call: Int) throws -> UploadResponse
    private let respondSessions: @Sendable (_ updates: [SessionUpdate]) throws -> UploadResponse

    init(
        respond: @escaping @Sendable (_ reports: [Report], _ call: Int) throws -> UploadResponse = { _, _ in .accepted },
        respondSessions: @escaping @Sendable (_ updates: [SessionUpdate]) throws -> UploadResponse = {
            .ingested(count: $0.count)
        }
    ) {
        self.respond = respond
        self.respondSessions = respondSessions
    }

    var requests: [Sent] { lock.withLock { sent } }
    var batchSizes: [Int] { requests.map(\.reports.count) }
    var reports: [Report] { requests.flatMap(\.reports) }
    /// Session updates sent, in order.
    var sessionUpdates: [SessionUpdate] { lock.withLock { sessionsSent.flatMap(\.updates) } }
    var sessionRequests: [UploadRequest] { lock.withLock { sessionsSent.map(\.request) } }

    private struct SessionBatch: Decodable { var sessions: [SessionUpdate] }

    func send(_ request: UploadRequest) async throws -> UploadResponse {
        let json = try Inflater.inflate(Array(request.body), format: .gzip, maxOutputBytes: 64 << 20)
        if request.url.lastPathComponent == "sessions" {
            let updates = try JSONDecoder.crashWire().decode(SessionBatch.self, from: Data(json)).sessions
            lock.withLock { sessionsSent.append((request, updates)) }
            return try respondSessions(updates)
        }
        let batch = try JSONDecoder.crashWire().decode(ReportBatch.self, from: Data(json))
        let call = lock.withLock {
            sent.append(Sent(request: request, reports: batch.reports))
            return sent.count - 1
        }
        return try respond(batch.reports, call)
    }
}

struct ReporterNetworkDown: Error {}

extension UploadResponse {
    static var accepted: UploadResponse { .ingested(count: 1) }

    static func ingested(count: Int, rejected: [IngestResponse.Rejection] = []) -> UploadResponse {
        let body = try! JSONEncoder().encode(
            IngestResponse(accepted: count - rejected.count, duplicates: 0, rejected: rejected))
        return UploadResponse(status: 202, headers: ["Content-Type": "application/json"], body: body)
    }

    static func status(_ status: Int, retryAfter: String? = nil) -> UploadResponse {
        var headers = ["Content-Type": "application/json"]
        if let retryAfter { headers["Retry-After"] = retryAfter }
        return UploadResponse(status: status, headers: headers, body: Data(#"{"error":"x"}"#.utf8))
    }
}

/// Collects log lines.
final class ReporterLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    var lines: [String] { lock.withLock { stored } }
    func append(_ line: String) { lock.withLock { stored.append(line) } }
}

/// A fresh, empty directory under the temporary directory.
func reporterTestDirectory(_ name: String = #function) -> URL {
    let safe = name.filter { $0.isLetter || $0.isNumber }
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("crashguard-tests", isDirectory: true)
        .appendingPathComponent("\(safe)-\(UUID().uuidString.prefix(8))", isDirectory: true)
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

func reporterTestConfiguration(
    directory: URL,
    transport: FakeTransport = FakeTransport(),
    log: ReporterLog = ReporterLog(),
    batchSize: Int = 100,
    maxQueueBytes: Int = 5 << 20,
    sampleRate: Double = 1,
    uploadEnabled: Bool = true,
    reporter: (@Sendable (Report) -> Report?)? = nil
) -> CrashGuard.Configuration {
    var configuration = CrashGuard.Configuration(
        serverURL: URL(string: "http://127.0.0.1:9")!,
        ingestKey: "ik_test",
        appID: "com.example.tests",
        appVersion: "1.2.3",
        appBuild: "45",
        device: DeviceInfo(os: "Linux", osVersion: "6.1", model: "x86_64", id: "device-1"),
        directory: directory,
        batchSize: batchSize,
        flushInterval: .seconds(3600),
        maxQueueBytes: maxQueueBytes,
        sampleRate: sampleRate,
        uploadEnabled: uploadEnabled,
        captureCrashes: false,
        transport: transport,
        reporter: reporter,
        log: { log.append($0) }
    )
    configuration.environment = "test"
    return configuration
}

/// A reporter with a manual clock and a deterministic backoff (no jitter: the ceiling).
func makeReporter(
    _ configuration: CrashGuard.Configuration,
    clock: ReporterTestClock = ReporterTestClock(),
    jitter: @escaping @Sendable (Double) -> Double = { $0 },
    random: @escaping @Sendable () -> Double = { 0 }
) throws -> Reporter {
    try Reporter(
        configuration: configuration,
        device: configuration.device,
        clock: clock,
        backoff: Backoff(base: .seconds(1), cap: .seconds(30), jitter: jitter),
        random: random
    )
}

func reporterEvent(
    _ reason: String, kind: ReportKind = .container, fatal: Bool = false,
    timestamp: Date = Date(timeIntervalSince1970: 1_800_000_000)
) -> GuardEvent {
    GuardEvent(
        kind: kind, reason: reason, stack: ["0 Demo 0x1 main + 1"], context: ["file": "Demo/App.swift"], fatal: fatal,
        timestamp: timestamp)
}
