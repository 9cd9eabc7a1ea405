import CrashWire
import Foundation
import Testing

@testable import CrashGuard

/// The kept store (fatal reports and session updates, never evicted) and the upload state
/// kept across launches (backoff, Retry-After, a 401).
@Suite("Reporter: the kept store and the upload state across launches")
struct ReporterStoreTests {
    func sessionUpdate(_ status: SessionUpdate.Status, at date: Date) -> SessionUpdate {
        SessionUpdate(
            sid: UUID(), did: "device-1", seq: 1, isInit: false, started: date, timestamp: date, duration: nil,
            status: status, errors: 0, attrs: .init(release: "com.example.tests@1.2.3", environment: nil))
    }

    @Test("a day offline with chatty guards evicts the oldest guard reports, never the crash or the session updates")
    func crashSurvivesADayOffline() async throws {
        let directory = reporterTestDirectory()
        let offline = FakeTransport { _, _ in throw ReporterNetworkDown() }
        let start = Date(timeIntervalSince1970: 1_800_000_000 - 86_400)  // the test clock's now, a day earlier
        // A 64 KiB queue, and a day of guard reports (one every 30 s, about 2 MiB): thirty
        // times what fits, the crash queued first so it is the oldest file.
        let config = reporterTestConfiguration(directory: directory, transport: offline, maxQueueBytes: 64 << 10)
        let reporter = try makeReporter(config)
        let crash = reporter.report(for: reporterEvent("SIGSEGV (SEGV_MAPERR) at 0x10", kind: .signal, fatal: true, timestamp: start))
        #expect(reporter.submit(crash))
        reporter.submitSession(sessionUpdate(.crashed, at: start), durable: true)
        for i in 0..<2880 {
            let when = start.addingTimeInterval(Double(i) * 30)
            reporter.record(reporterEvent("index \(i) beyond bounds [0 .. 2] " + String(repeating: "x", count: 600), timestamp: when))
            if i % 100 == 99 { reporter.queue?.sync() }  // the hand-off buffer never overflows
        }
        let queue = try #require(reporter.queue)
        queue.sync()
        #expect(queue.dropped > 2000, "the guard reports did not fill the queue")
        #expect(queue.bytes <= 64 << 10)
        reporter.shutdown()

        // Back online, a new launch: the crash and the session update go first.
        let online = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let next = try makeReporter(reporterTestConfiguration(directory: directory, transport: online, maxQueueBytes: 64 << 10))
        defer { next.shutdown() }
        #expect(await next.flush(timeout: .seconds(20)))
        #expect(online.requests.first?.reports.first?.id == crash.id)
        #expect(online.reports.filter { $0.fatal == true }.map(\.id) == [crash.id])
        #expect(online.sessionUpdates.map(\.status) == [.crashed])
        // The newest guard reports survived, the oldest went.
        #expect(online.reports.contains { $0.reason.hasPrefix("index 2879 ") })
        #expect(!online.reports.contains { $0.reason.hasPrefix("index 0 ") })
    }

    @Test("reports carry the configured environment; one the contract refuses is ignored and logged")
    func environmentStamp() async throws {
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let reporter = try makeReporter(reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport))
        reporter.record(reporterEvent("a"))
        #expect(await reporter.flush(timeout: .seconds(10)))
        reporter.shutdown()
        #expect(transport.reports.map(\.environment) == ["test"])

        let log = ReporterLog()
        var bad = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log)
        bad.environment = String(repeating: "e", count: 65)
        let second = try makeReporter(bad)
        second.record(reporterEvent("b"))
        #expect(await second.flush(timeout: .seconds(10)))
        second.shutdown()
        #expect(transport.reports.last?.reason == "b" && transport.reports.last?.environment == nil)
        #expect(log.lines.contains { $0.contains("environment is ignored") })
    }

    @Test("the kept store is a folder of its own; guard reports stay in the queue directory")
    func keptStoreLayout() throws {
        let directory = reporterTestDirectory()
        let reporter = try makeReporter(reporterTestConfiguration(directory: directory))
        defer { reporter.shutdown() }
        reporter.record(reporterEvent("guard"))
        reporter.record(reporterEvent("crash", kind: .signal, fatal: true))
        reporter.submitSession(sessionUpdate(.exited, at: Date()), durable: true)
        reporter.queue?.sync()
        let queueDirectory = directory.appendingPathComponent("queue")
        let kept = try FileManager.default.contentsOfDirectory(atPath: queueDirectory.appendingPathComponent("kept").path)
        #expect(kept.filter { $0.hasSuffix(".report") }.count == 1 && kept.filter { $0.hasSuffix(".session") }.count == 1)
        let top = try FileManager.default.contentsOfDirectory(atPath: queueDirectory.path)
        #expect(top.filter { $0.hasSuffix(".report") }.count == 1)
    }

    @Test("a restarted reporter waits out the Retry-After the last run got, instead of retrying at once")
    func retryAfterSurvivesARestart() async throws {
        let directory = reporterTestDirectory()
        let outage = FakeTransport { _, _ in .status(503, retryAfter: "600") }
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try Reporter(
            configuration: reporterTestConfiguration(directory: directory, transport: outage), device: DeviceInfo(id: "d"),
            clock: ParkedClock(now: base), backoff: Backoff(jitter: { $0 }))
        first.record(reporterEvent("a"))
        #expect(await first.flush(timeout: .milliseconds(500)) == false)
        await first.stop()
        #expect(outage.requests.count == 1)

        // Ten seconds later the app starts again; the server is back.
        let online = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let clock = ReporterTestClock(now: base.addingTimeInterval(10))
        let second = try makeReporter(reporterTestConfiguration(directory: directory, transport: online), clock: clock)
        defer { second.shutdown() }
        #expect(await second.flush(timeout: .seconds(10)))
        #expect(clock.sleeps.first == .seconds(590), "the restarted reporter did not wait out the server's Retry-After")
        #expect(online.requests.count == 1)
        // A success forgets the delay: the launch after that uploads at once.
        #expect(UploadState.load(from: directory.appendingPathComponent("queue")).isEmpty)
    }

    @Test("the backoff's attempt count carries over a restart, so an outage is not hammered at launch")
    func backoffSurvivesARestart() async throws {
        let directory = reporterTestDirectory()
        let down = FakeTransport { _, _ in throw ReporterNetworkDown() }
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try Reporter(
            configuration: reporterTestConfiguration(directory: directory, transport: down), device: DeviceInfo(id: "d"),
            clock: ParkedClock(now: base), backoff: Backoff(jitter: { $0 }))
        first.record(reporterEvent("a"))
        _ = await first.flush(timeout: .milliseconds(300))
        await first.stop()
        let state = UploadState.load(from: directory.appendingPathComponent("queue"))
        #expect(state.attempt == 1 && state.notBefore == base.addingTimeInterval(1))

        let clock = ReporterTestClock(now: base)
        let second = try makeReporter(
            reporterTestConfiguration(
                directory: directory,
                transport: FakeTransport { r, call in
                    call == 0 ? .status(500) : .ingested(count: r.count)
                }), clock: clock)
        defer { second.shutdown() }
        #expect(await second.flush(timeout: .seconds(10)))
        // Waits the 1 s the first run chose, then after a failure backs off from attempt 1 (2 s), not 0 (1 s).
        #expect(clock.sleeps == [.seconds(1), .seconds(2)])
    }

    @Test("a 401 stops uploads with that key for a day, across restarts; another key uploads at once")
    func unauthorizedSurvivesARestart() async throws {
        let directory = reporterTestDirectory()
        let refusing = FakeTransport { _, _ in .status(401) }
        let clock = ReporterTestClock()
        let first = try makeReporter(reporterTestConfiguration(directory: directory, transport: refusing), clock: clock)
        first.record(reporterEvent("a"))
        #expect(await first.flush(timeout: .seconds(5)) == false)
        first.shutdown()
        #expect(refusing.requests.count == 1)

        let log = ReporterLog()
        let again = FakeTransport()
        let second = try makeReporter(reporterTestConfiguration(directory: directory, transport: again, log: log), clock: clock)
        #expect(await second.flush(timeout: .seconds(2)) == false)
        second.shutdown()
        #expect(again.requests.isEmpty, "a restart retried the key the server refused")
        #expect(log.lines.contains { $0.contains("401") })

        var rotated = reporterTestConfiguration(directory: directory, transport: again)
        rotated.ingestKey = "ik_rotated"
        let third = try makeReporter(rotated, clock: clock)
        #expect(await third.flush(timeout: .seconds(5)))
        third.shutdown()
        #expect(again.requests.count == 1)

        // The old key, a day later: one more try.
        let later = FakeTransport()
        let dayLater = ReporterTestClock(now: clock.now.addingTimeInterval(UploadState.unauthorizedPause + 1))
        let fourth = try makeReporter(reporterTestConfiguration(directory: directory, transport: later), clock: dayLater)
        fourth.record(reporterEvent("b"))
        #expect(await fourth.flush(timeout: .seconds(5)))
        fourth.shutdown()
        #expect(later.requests.count == 1)
    }
}

/// Uses the process-wide fsync hook, so it runs in the serialized entry-point suite.
extension CrashGuardEntryTests {
    @Test("guard reports are written without fsync, fatal reports and final session updates with it, and shutdown syncs the rest")
    func fsyncOnlyWhereItMatters() throws {
        let directory = reporterTestDirectory()
        let queueDirectory = directory.appendingPathComponent("queue").standardizedFileURL.path
        let synced = ReporterLog()
        DiskQueue.fsyncHook = { path in if path.hasPrefix(queueDirectory) { synced.append(path) } }
        defer { DiskQueue.fsyncHook = nil }
        let reporter = try makeReporter(reporterTestConfiguration(directory: directory))
        for i in 0..<5 { reporter.record(reporterEvent("guard \(i)")) }
        reporter.queue?.sync()
        #expect(synced.lines.isEmpty, "a guard report was fsynced: \(synced.lines)")

        let crash = reporter.report(for: reporterEvent("crash", kind: .signal, fatal: true))
        #expect(reporter.submit(crash))
        reporter.submitSession(
            SessionUpdate(
                sid: UUID(), did: nil, seq: 1, isInit: false, started: Date(timeIntervalSince1970: 1_800_000_000),
                timestamp: Date(timeIntervalSince1970: 1_800_000_000), duration: 1, status: .exited, errors: 0,
                attrs: .init(release: "a@1", environment: nil)),
            durable: true)
        let durable = synced.lines.filter { $0.hasSuffix(".report") || $0.hasSuffix(".session") }
        #expect(durable.count == 2 && durable.allSatisfy { $0.contains("/kept/") })
        #expect(synced.lines.contains { $0.hasSuffix("/kept") }, "the kept folder was not synced after the rename")

        reporter.shutdown()  // the last user closes the queue: shutdown syncs the guard reports
        let atShutdown = synced.lines.filter { $0.hasSuffix(".report") && !$0.contains("/kept/") }
        #expect(atShutdown.count == 5)
    }
}
