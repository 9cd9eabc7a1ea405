import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One queue per directory, leases, eviction that survives a crash, the retry cap, and the
/// statuses only the contract's server or something in between answers.
@Suite("Reporter: one queue per directory, leases, retry cap, crash-safe eviction")
struct ReporterRaceTests {
    @Test("the queue directory is locked: another opener (another process) is refused until the queue closes")
    func directoryLock() throws {
        let directory = reporterTestDirectory()
        let queue = try DiskQueue.open(directory: directory, maxBytes: 1 << 20)
        let same = try DiskQueue.open(directory: directory, maxBytes: 1 << 20)
        #expect(queue === same)  // this process: one shared instance
        // Another open file description, as another process would have.
        let fd = open(directory.appendingPathComponent("lock").path, O_RDWR)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX | LOCK_NB) != 0)
        queue.relinquish()
        #expect(flock(fd, LOCK_EX | LOCK_NB) != 0)  // one user left
        same.relinquish()
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
        flock(fd, LOCK_UN)
    }

    @Test("a report in a leased batch is never evicted, nor leased twice")
    func leasesSurviveEviction() throws {
        let directory = reporterTestDirectory()
        let queue = try DiskQueue.open(directory: directory, maxBytes: 250)
        defer { queue.relinquish() }
        let payload = { (i: Int) in Data(String(repeating: "\(i)", count: 100).utf8) }
        queue.append(payload(0), id: UUID(), durable: true)
        queue.append(payload(1), id: UUID(), durable: true)
        let batch = queue.lease(limit: 10)
        #expect(batch.count == 2)
        #expect(queue.lease(limit: 10).isEmpty)
        queue.append(payload(2), id: UUID(), durable: true)  // 300 bytes > 250: one must go
        #expect(queue.dropped == 1)
        #expect(batch.allSatisfy { queue.read($0) != nil }, "a file of the batch in flight was evicted")
        queue.remove(batch)
        #expect(queue.count == 0)
    }

    #if !os(Windows)
    @Test("a crash after eviction renamed its victims neither loses nor double-counts the drop")
    func crashAfterRename() async throws {
        let directory = EvictionChild.directory("renamed")
        await #expect(processExitsWith: .signal(SIGKILL)) { EvictionChild.run("renamed") }
        try EvictionChild.check(directory)
    }

    @Test("a crash after eviction counted its victims neither loses nor double-counts the drop")
    func crashAfterCount() async throws {
        let directory = EvictionChild.directory("counted")
        await #expect(processExitsWith: .signal(SIGKILL)) { EvictionChild.run("counted") }
        try EvictionChild.check(directory)
    }
    #endif

    @Test("the retry cap: a batch failing with 500 goes one by one; the report that keeps failing is dead-lettered and counted")
    func retryCapAndDeadLetters() async throws {
        let transport = FakeTransport { reports, _ in
            reports.contains { $0.reason == "poison" } ? .status(500) : .ingested(count: reports.count)
        }
        let log = ReporterLog()
        let clock = ReporterTestClock()
        let reporter = try makeReporter(
            reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log), clock: clock)
        for reason in ["a", "poison", "b"] { reporter.record(reporterEvent(reason)) }
        #expect(await reporter.flush(timeout: .seconds(20)))
        let sentOK = transport.requests.filter { !$0.reports.contains { $0.reason == "poison" } }.flatMap(\.reports)
        #expect(sentOK.map(\.reason) == ["a", "b"])
        #expect(transport.requests.filter { $0.reports.contains { $0.reason == "poison" } }.count == 16)  // 8 as a batch, 8 alone
        #expect(reporter.queue?.count == 0)
        #expect(log.lines.contains { $0.contains("dead letters") })
        let dead = reporter.configuration.directory.appendingPathComponent("queue/dead")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dead.path).count == 1)
        // The count travels with the next upload ("b") and is cleared by its success.
        #expect(sentOK.last?.context?["crashguard.deadLettered"] == "1")
        #expect(sentOK.first?.context?["crashguard.deadLettered"] == nil)
        #expect(reporter.queue?.deadLettered == 0)
    }

    @Test("network errors and 503 never count toward the cap")
    func outagesDoNotDeadLetter() async throws {
        let transport = FakeTransport { reports, call in
            if call < 12 { if call % 2 == 0 { throw ReporterNetworkDown() } else { return .status(503) } }
            return .ingested(count: reports.count)
        }
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport))
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(20)))
        #expect(reporter.queue?.deadLettered == 0)
        #expect(transport.reports.last?.reason == "a")
    }

    @Test("200 and 204 are success; 403 and 404 (never sent by the contract's server) are retried, not a stop")
    func statuses() async throws {
        let transport = FakeTransport { reports, call in
            switch call {
            case 0: return .status(404)
            case 1: return .status(403)
            case 2: return UploadResponse(status: 200, headers: [:], body: Data())
            default: return UploadResponse(status: 204, headers: [:], body: Data())
            }
        }
        let log = ReporterLog()
        let reporter = try makeReporter(
            reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log))
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        reporter.record(reporterEvent("b"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(transport.requests.count == 4)
        #expect(await reporter.uploader?.stopped == false)
        #expect(log.lines.filter { $0.contains("404") }.count == 1)
        #expect(reporter.queue?.count == 0)
    }

    @Test("flush puts what the caller recorded on disk before it returns, even when nothing can be sent")
    func flushIsDurable() async throws {
        let transport = FakeTransport { _, _ in throw ReporterNetworkDown() }
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        let reporter = try makeReporter(config)
        for i in 0..<50 { reporter.record(reporterEvent("r\(i)")) }
        #expect(await reporter.flush(timeout: .milliseconds(200)) == false)
        let files = try FileManager.default.contentsOfDirectory(atPath: config.directory.appendingPathComponent("queue").path)
        #expect(files.filter { $0.hasSuffix(".report") }.count == 50)
        reporter.shutdown()
    }

    @Test("the scope rides on every report within the limits; a report's own entries win; breadcrumbs are a ring")
    func scope() throws {
        let scope = Scope()
        scope.setUser(id: "u-1")
        scope.setTag("plan", "pro")
        scope.setContext("screen", "checkout")
        for i in 0..<25 { scope.addBreadcrumb("step \(i)", category: "nav", timestamp: Date(timeIntervalSince1970: Double(i))) }
        let entries = scope.entries()
        #expect(entries.prefix(3).map { $0.key } == ["user.id", "tag.plan", "screen"])
        let crumbs = entries.filter { $0.key.hasPrefix("breadcrumb.") }
        #expect(crumbs.count == Scope.maxBreadcrumbs)
        #expect(crumbs.first?.key == "breadcrumb.00")
        #expect(crumbs.first?.value.hasSuffix("[nav] step 24") == true)
        #expect(crumbs.last?.value.hasSuffix("[nav] step 5") == true)

        var own = Dictionary(uniqueKeysWithValues: (0..<60).map { ("k\($0)", "v") })
        own["screen"] = "mine"
        let merged = try #require(scope.apply(to: own))
        #expect(merged.count == 64)
        #expect(merged["screen"] == "mine")
        #expect(merged["user.id"] == "u-1")
        #expect(merged["breadcrumb.01"] == nil)  // no room left
        scope.clear()
        #expect(scope.entries().isEmpty)
    }
}

/// A child that fills a small queue until eviction, and is killed (like a crash or the OS)
/// at one of eviction's steps; the parent reopens the queue.
enum EvictionChild {
    static func directory(_ stage: String) -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-eviction-\(stage)", isDirectory: true)
        return url
    }

    static func run(_ stage: String) {
        let directory = directory(stage)
        try? FileManager.default.removeItem(at: directory)
        DiskQueue.evictionHook = { step in if step == stage { kill(getpid(), SIGKILL) } }
        guard let queue = try? DiskQueue.open(directory: directory, maxBytes: 250) else { exit(3) }
        for i in 0..<3 { queue.append(Data(String(repeating: "\(i)", count: 100).utf8), id: UUID(), durable: true) }
        exit(4)  // eviction did not happen
    }

    static func check(_ directory: URL) throws {
        let queue = try DiskQueue.open(directory: directory, maxBytes: 250)
        defer { queue.relinquish() }
        #expect(queue.dropped == 1)
        #expect(queue.count == 2)
        let texts = queue.peek(limit: 10).compactMap { queue.read($0) }.map { String(decoding: $0.prefix(1), as: UTF8.self) }
        #expect(texts == ["1", "2"])
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(!names.contains { $0.hasSuffix(".evicted") })
    }
}

/// Uses the process-wide entry point, so it runs in the serialized entry-point suite.
extension CrashGuardEntryTests {
    @Test("racing starts on one directory leave one reporter and one queue: every report is sent exactly once")
    func racingStarts() async throws {
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, batchSize: 7)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    _ = try? CrashGuard.start(config, clock: SystemReporterClock(), backoff: Backoff())
                    for i in 0..<10 { CrashGuard.record("report \(i)") }
                }
            }
        }
        #expect(await CrashGuard.flush(timeout: .seconds(20)))
        await CrashGuard.stop()
        await CrashGuard.stop()  // idempotent
        let ids = transport.reports.map(\.id)
        #expect(ids.count == 80)
        #expect(Set(ids).count == ids.count, "a report was uploaded twice")
        let left = try FileManager.default.contentsOfDirectory(
            atPath: config.directory.appendingPathComponent("queue").path)
        #expect(!left.contains { $0.hasSuffix(".report") || $0.hasSuffix(".tmp") })
    }
}
