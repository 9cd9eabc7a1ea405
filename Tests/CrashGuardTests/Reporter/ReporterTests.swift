import CrashWire
import Foundation
import Testing

@testable import CrashGuard

@Suite("Reporter: queue, batching, delivery rules")
struct ReporterTests {
    @Test("reports are stamped, queued on disk and uploaded in batches of batchSize, gzip, with the key")
    func batching() async throws {
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, batchSize: 3)
        let reporter = try makeReporter(config)
        for i in 0..<7 { reporter.record(reporterEvent("index \(i) beyond bounds")) }
        #expect(reporter.queue?.count == 7)
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(transport.batchSizes == [3, 3, 1])
        #expect(transport.reports.map(\.reason) == (0..<7).map { "index \($0) beyond bounds" })
        let request = try #require(transport.requests.first?.request)
        #expect(request.url.absoluteString == "http://127.0.0.1:9/v1/reports")
        #expect(request.headers["X-Crash-Key"] == "ik_test")
        #expect(request.headers["Content-Encoding"] == "gzip")
        #expect(request.headers["Content-Type"] == "application/json")
        let report = try #require(transport.reports.first)
        #expect(report.app == AppInfo(id: "com.example.tests", version: "1.2.3", build: "45"))
        #expect(report.device?.id == "device-1")
        #expect(report.kind == .container)
        #expect(report.fatal == nil)
        #expect(reporter.queue?.count == 0)
    }

    @Test("batches never exceed the contract's 1000 reports")
    func batchSizeIsClamped() throws {
        var config = reporterTestConfiguration(directory: reporterTestDirectory())
        config.batchSize = 5000
        #expect(config.effectiveBatchSize == 1000)
        config.batchSize = 0
        #expect(config.effectiveBatchSize == 1)
    }

    @Test("network errors back off exponentially up to the cap, then the batch goes through")
    func backoffSchedule() async throws {
        let transport = FakeTransport { reports, call in
            if call < 7 { throw ReporterNetworkDown() }
            return .ingested(count: reports.count)
        }
        let clock = ReporterTestClock()
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport), clock: clock)
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        // base 1 s doubling, cap 30 s, full jitter at its ceiling (jitter = identity).
        #expect(clock.sleeps == [1, 2, 4, 8, 16, 30, 30].map { Duration.seconds($0) })
        #expect(transport.requests.count == 8)
        #expect(reporter.queue?.count == 0)
    }

    @Test("full jitter draws each delay from 0 up to the exponential ceiling")
    func fullJitter() {
        let ceilings = ReporterLog()
        let backoff = Backoff(
            base: .seconds(1), cap: .seconds(10),
            jitter: {
                ceilings.append("\($0)")
                return $0 / 4
            })
        let delays = (0..<5).map { backoff.delay(attempt: $0, retryAfter: nil) }
        #expect(ceilings.lines == ["1.0", "2.0", "4.0", "8.0", "10.0"])
        #expect(delays == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .milliseconds(2500)])
        let real = Backoff(base: .seconds(1), cap: .seconds(10))
        for attempt in 0..<20 {
            let d = real.delay(attempt: attempt, retryAfter: nil)
            #expect(d >= .zero && d <= .seconds(10))
        }
    }

    @Test("503 and 429 are retried after the server's Retry-After, seconds or HTTP-date")
    func retryAfter() async throws {
        let transport = FakeTransport { reports, call in
            switch call {
            case 0: return .status(503, retryAfter: "7")
            case 1: return .status(429, retryAfter: "Fri, 15 Jan 2027 08:00:30 GMT")
            case 2: return .status(503)
            default: return .ingested(count: reports.count)
            }
        }
        let clock = ReporterTestClock()  // 1_800_000_000 = Fri, 15 Jan 2027 08:00:00 GMT
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport), clock: clock)
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        // 7 s; then the date, 23 s after the clock (advanced by 7); then plain backoff (attempt 2: 4 s).
        #expect(clock.sleeps == [.seconds(7), .seconds(23), .seconds(4)])
        #expect(Backoff.parseRetryAfter("120", now: Date()) == .seconds(120))
        #expect(Backoff.parseRetryAfter("soon", now: Date()) == nil)
        #expect(Backoff().delay(attempt: 0, retryAfter: .seconds(86_400 * 3)) == .seconds(3600))
    }

    @Test("413 splits the batch in halves until every part fits; a single refused report is removed")
    func tooLargeSplits() async throws {
        let transport = FakeTransport { reports, _ in
            if reports.contains(where: { $0.reason == "poison" }) && reports.count == 1 { return .status(413) }
            return reports.count > 2 ? .status(413) : .ingested(count: reports.count)
        }
        let log = ReporterLog()
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log))
        for i in 0..<5 { reporter.record(reporterEvent("r\(i)")) }
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(transport.batchSizes == [5, 2, 3, 1, 2])
        #expect(Set(transport.reports.filter { _ in true }.map(\.reason)).count == 5)

        reporter.record(reporterEvent("poison"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(transport.batchSizes.suffix(1) == [1])
        #expect(log.lines.contains { $0.contains("(413)") })
        #expect(reporter.queue?.count == 0)
    }

    @Test("401 stops uploading, logs once and keeps the queue")
    func unauthorizedStops() async throws {
        let transport = FakeTransport { _, _ in .status(401) }
        let log = ReporterLog()
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log))
        reporter.record(reporterEvent("a"))
        reporter.record(reporterEvent("b"))
        #expect(await reporter.flush(timeout: .seconds(10)) == false)
        reporter.record(reporterEvent("c"))
        #expect(await reporter.flush(timeout: .seconds(10)) == false)
        #expect(transport.requests.count == 1)
        #expect(log.lines.filter { $0.contains("401") }.count == 1)
        #expect(reporter.queue?.count == 3)
        #expect(await reporter.uploader?.stopped == true)
    }

    @Test("a 202 deletes the batch; rejected indices are logged and deleted too")
    func rejectedAreLoggedAndDeleted() async throws {
        let transport = FakeTransport { reports, _ in
            .ingested(count: reports.count, rejected: [.init(index: 1, error: "timestamp: older than 30 days")])
        }
        let log = ReporterLog()
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log))
        for i in 0..<3 { reporter.record(reporterEvent("r\(i)")) }
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(reporter.queue?.count == 0)
        let rejectedID = transport.reports[1].id.uuidString.lowercased()
        #expect(log.lines.contains { $0.contains(rejectedID) && $0.contains("timestamp: older than 30 days") })
    }

    @Test("a full queue drops the oldest, and the count travels in the next upload's context until acknowledged")
    func queueCapAndDropCounting() async throws {
        let directory = reporterTestDirectory()
        let failing = FakeTransport { _, _ in .status(503, retryAfter: "1") }
        let probe = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory()))
        probe.record(reporterEvent("r00"))
        probe.queue?.sync()
        let oneReport = try #require(probe.queue?.bytes)

        let config = reporterTestConfiguration(directory: directory, transport: failing, maxQueueBytes: oneReport * 3 + oneReport / 2)
        let reporter = try makeReporter(config)
        for i in 0..<10 { reporter.record(reporterEvent(String(format: "r%02d", i))) }
        reporter.queue?.sync()
        #expect(reporter.queue?.count == 3)
        #expect(reporter.queue?.dropped == 7)

        // The count survives a restart (the last user closes the queue; the next opens it from disk).
        reporter.shutdown()
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        var restarted = config
        restarted.transport = transport
        let second = try makeReporter(restarted)
        #expect(second.queue?.dropped == 7)
        #expect(await second.flush(timeout: .seconds(10)))
        #expect(transport.reports.map(\.reason) == ["r07", "r08", "r09"])
        #expect(transport.reports[0].context?["crashguard.dropped"] == "7")
        #expect(transport.reports[1].context?["crashguard.dropped"] == nil)
        #expect(second.queue?.dropped == 0)

        second.record(reporterEvent("later"))
        #expect(await second.flush(timeout: .seconds(10)))
        #expect(transport.reports.last?.context?["crashguard.dropped"] == nil)
    }

    @Test("sampling keeps the configured fraction of non-fatal reports and every fatal one")
    func sampling() async throws {
        let draws = LockedBox([0.1, 0.9, 0.3, 0.7, 0.95, 0.2])
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let reporter = try makeReporter(
            reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, sampleRate: 0.5),
            random: { draws.withLock { $0.removeFirst() } })
        for i in 0..<4 { reporter.record(reporterEvent("n\(i)")) }
        reporter.record(reporterEvent("crash", kind: .signal, fatal: true))
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(transport.reports.map(\.reason) == ["crash", "n0", "n2"])  // the kept store leaves first
        #expect(draws.withLock { $0.count } == 2)  // fatal reports draw nothing
    }

    @Test("the reporter block may change, drop or forward each report before it is queued")
    func reporterBlock() async throws {
        let forwarded = LockedBox<[Report]>([])
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let reporter = try makeReporter(
            reporterTestConfiguration(
                directory: reporterTestDirectory(), transport: transport,
                reporter: { report in
                    forwarded.withLock { $0.append(report) }
                    if report.kind == .kvo { return nil }
                    var changed = report
                    changed.context?["user"] = "u-1"
                    changed.fingerprint = ["custom"]
                    return changed
                }))
        reporter.record(reporterEvent("a"))
        reporter.record(reporterEvent("dropped", kind: .kvo))
        #expect(reporter.queue?.count == 1)
        #expect(await reporter.flush(timeout: .seconds(10)))
        #expect(forwarded.withLock { $0.map(\.reason) } == ["a", "dropped"])
        #expect(transport.reports.count == 1)
        #expect(transport.reports[0].context?["user"] == "u-1")
        #expect(transport.reports[0].fingerprint == ["custom"])
    }

    @Test("with uploading off, reports only reach the reporter block")
    func uploadingOff() async throws {
        let forwarded = LockedBox<[Report]>([])
        let transport = FakeTransport()
        let directory = reporterTestDirectory()
        let reporter = try makeReporter(
            reporterTestConfiguration(
                directory: directory, transport: transport, uploadEnabled: false,
                reporter: { report in
                    forwarded.withLock { $0.append(report) }
                    return report
                }))
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(1)))
        #expect(forwarded.withLock { $0.count } == 1)
        #expect(transport.requests.isEmpty)
        #expect(reporter.queue == nil)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("queue").path))
    }

    @Test("oversized fields are cut to the contract's limits; a report that stays invalid is dropped and logged")
    func limits() throws {
        let log = ReporterLog()
        var config = reporterTestConfiguration(directory: reporterTestDirectory(), log: log)
        let reporter = try makeReporter(config)
        var big = reporterEvent(String(repeating: "é", count: 10_000))
        big.stack = (0..<300).map { "\($0) " + String(repeating: "x", count: 2000) }
        big.context = Dictionary(uniqueKeysWithValues: (0..<100).map { ("k\($0)", String(repeating: "v", count: 2000)) })
        reporter.record(big)
        #expect(reporter.queue?.count == 1)
        let entry = try #require(reporter.queue?.peek(limit: 1).first)
        let stored = try JSONDecoder.crashWire().decode(Report.self, from: try #require(reporter.queue?.read(entry)))
        #expect(stored.validationError(now: Date(timeIntervalSince1970: 1_800_000_000)) == nil)
        #expect(stored.reason.utf8.count <= 8192)
        #expect(stored.stack?.count == 256)

        config.app = AppInfo(id: "", version: "1")
        let invalid = try makeReporter(config)
        invalid.record(reporterEvent("x"))
        #expect(invalid.queue?.count == 1)  // same directory: only the first report
        #expect(log.lines.contains { $0.contains("app.id") })
    }

    @Test("the queue is crash-safe: leftovers of an interrupted write are ignored, order survives a restart")
    func queueRestart() throws {
        let directory = reporterTestDirectory()
        let queue = try DiskQueue.open(directory: directory, maxBytes: 1 << 20)
        for i in 0..<3 { queue.append(Data("report \(i)".utf8), id: UUID()) }
        queue.relinquish()  // writes what is pending, then closes
        try Data("half a rep".utf8).write(to: directory.appendingPathComponent("00000000000000000099-x.report.tmp"))
        let reopened = try DiskQueue.open(directory: directory, maxBytes: 1 << 20)
        defer { reopened.relinquish() }
        #expect(reopened !== queue)
        #expect(reopened.count == 3)
        let texts = reopened.peek(limit: 10).compactMap { reopened.read($0) }.map { String(decoding: $0, as: UTF8.self) }
        #expect(texts == ["report 0", "report 1", "report 2"])
        reopened.append(Data("report 3".utf8), id: UUID())
        #expect(reopened.peek(limit: 10).last.flatMap { reopened.read($0) } == Data("report 3".utf8))
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("00000000000000000099-x.report.tmp").path))
    }

    @Test("a full batch uploads at once, and the timer uploads a partial one")
    func sizeAndTimerTriggers() async throws {
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        var config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, batchSize: 2)
        let reporter = try Reporter(configuration: config, device: config.device)
        reporter.startUploading()
        reporter.record(reporterEvent("a", timestamp: Date()))
        reporter.record(reporterEvent("b", timestamp: Date()))
        // Sent and deleted: a stop while the batch is still leased would give it back to the
        // next reporter, which sends it again (at least once), and the count below would skip 3.
        #expect(await eventuallyReported { transport.reports.count == 2 && reporter.queue?.count == 0 })
        await reporter.stop()

        config.flushInterval = .milliseconds(100)
        config.batchSize = 100
        let timed = try Reporter(configuration: config, device: config.device)
        timed.startUploading()
        timed.record(reporterEvent("c", timestamp: Date()))
        #expect(await eventuallyReported { transport.reports.map(\.reason) == ["a", "b", "c"] })
        await timed.stop()
    }

    @Test("the install id is created once and kept on disk")
    func installID() {
        let directory = reporterTestDirectory()
        let first = CrashGuard.installID(in: directory)
        #expect(UUID(uuidString: first) != nil)
        #expect(CrashGuard.installID(in: directory) == first)
    }
}

/// Polls `condition` for up to `seconds`.
func eventuallyReported(seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return condition()
}
