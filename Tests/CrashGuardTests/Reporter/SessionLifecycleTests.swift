import CrashWire
import Foundation
import Testing

@testable import CrashGuard

/// Sessions through the process-wide entry point (the serialized entry-point suite).
extension CrashGuardEntryTests {
    @Test("a run's session: init at start, kept across a restart, an ok update at the first guard error, exited at close")
    func sessionOfOneRun() async throws {
        let transport = FakeTransport { reports, _ in .ingested(count: reports.count) }
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        try CrashGuard.start(config)
        let sid = try #require(SessionLifecycle.sid)
        try CrashGuard.start(config)  // a reconfiguration, not a new run
        #expect(SessionLifecycle.sid == sid)
        let numbers = [1, 2, 3]
        _ = numbers[guarded: 5]
        _ = numbers[guarded: 6]
        #expect(await CrashGuard.close(timeout: .seconds(10)))
        #expect(SessionLifecycle.sid == nil)

        let updates = transport.sessionUpdates
        #expect(updates.map(\.status) == [.ok, .ok, .exited])
        #expect(updates.map(\.seq) == [0, 1, 2])
        #expect(updates.map(\.isInit) == [true, false, false])
        #expect(updates.map(\.errors) == [0, 1, 2])
        #expect(updates.allSatisfy { $0.sid == sid && $0.did == "device-1" })
        #expect(updates.allSatisfy { $0.attrs == .init(release: "com.example.tests@1.2.3", environment: "test") })
        let request = try #require(transport.sessionRequests.first)
        #expect(request.url.absoluteString == "http://127.0.0.1:9/v1/sessions")
        #expect(request.headers["X-Crash-Key"] == "ik_test" && request.headers["Content-Encoding"] == "gzip")
        #expect(transport.reports.count == 2)
    }

    @Test("a session the previous run left unfinished (SIGKILL) ends abnormal at the next start, before the new one")
    func killedRunIsAbnormal() async throws {
        let transport = FakeTransport()
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        let killed = SessionState(
            sid: UUID(), did: "device-1", started: Date().addingTimeInterval(-60), release: "com.example.tests@1.2.2",
            environment: "test", seq: 0, errors: 0)
        FileSessionStorage(directory: config.directory).save(killed)
        try CrashGuard.start(config)
        #expect(await CrashGuard.close(timeout: .seconds(10)))
        let updates = transport.sessionUpdates
        #expect(updates.map(\.status) == [.abnormal, .ok, .exited])
        #expect(updates[0].sid == killed.sid && updates[0].attrs.release == "com.example.tests@1.2.2")
        #expect(updates[1].sid != killed.sid)
    }

    @Test("a session the previous run left unfinished with a crash record ends crashed")
    func crashedRunIsCrashed() async throws {
        let transport = FakeTransport()
        var config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        config.captureCrashes = true
        let crashed = SessionState(
            sid: UUID(), did: "device-1", started: Date().addingTimeInterval(-60), release: "com.example.tests@1.2.3",
            environment: "test", seq: 0, errors: 0)
        FileSessionStorage(directory: config.directory).save(crashed)
        let record = CrashCapture.recordURL(config.directory)
        try FileManager.default.createDirectory(at: record.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("not a whole record".utf8).write(to: record)
        try CrashGuard.start(config)
        #expect(await CrashGuard.close(timeout: .seconds(10)))
        let updates = transport.sessionUpdates
        #expect(updates.first?.sid == crashed.sid && updates.first?.status == .crashed)
    }

    @Test("trackSessions off: no session is started, stored or sent")
    func sessionsOff() async throws {
        let transport = FakeTransport()
        var config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport)
        config.trackSessions = false
        try CrashGuard.start(config)
        #expect(SessionLifecycle.sid == nil)
        CrashGuard.record("a custom report")
        #expect(await CrashGuard.close(timeout: .seconds(10)))
        #expect(transport.sessionUpdates.isEmpty && transport.reports.count == 1)
        #expect(FileSessionStorage(directory: config.directory).load() == nil)
    }

    @Test("session updates the server rejects are dropped (a resend cannot fix them); a 503 keeps them for later")
    func sessionAnswers() async throws {
        let calls = LockedBox(0)
        let transport = FakeTransport(respondSessions: { updates in
            let call = calls.withLock { n -> Int in
                n += 1
                return n
            }
            if call == 1 { return .status(503, retryAfter: "0") }
            return .ingested(count: updates.count, rejected: [.init(index: 0, error: "started: outside [now - 30 days, now + 1 day]")])
        })
        let log = ReporterLog()
        let config = reporterTestConfiguration(directory: reporterTestDirectory(), transport: transport, log: log)
        try CrashGuard.start(config)
        #expect(await CrashGuard.close(timeout: .seconds(10)))
        #expect(transport.sessionRequests.count >= 2, "the 503 was retried")
        #expect(log.lines.contains { $0.contains("rejected a session update: started") })
    }
}
