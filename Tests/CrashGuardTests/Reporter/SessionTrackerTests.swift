import CrashWire
import Foundation
import Testing

@testable import CrashGuard

/// The stored session in memory: the tracker's file-system seam.
final class InMemorySessionStorage: SessionStorage, @unchecked Sendable {
    private let lock = NSLock()
    private var stored: SessionState?
    init(_ state: SessionState? = nil) { stored = state }
    var state: SessionState? { lock.withLock { stored } }
    func load() -> SessionState? { lock.withLock { stored } }
    func save(_ state: SessionState) { lock.withLock { stored = state } }
    func remove() { lock.withLock { stored = nil } }
}

@Suite("Sessions: one per run, ended exited, crashed or abnormal")
struct SessionTrackerTests {
    let clock = ReporterTestClock()

    func tracker(_ storage: InMemorySessionStorage) -> SessionTracker {
        SessionTracker(release: "com.example.app@1.4.0", environment: "staging", did: "install-1", clock: clock, storage: storage)
    }

    func begin(_ tracker: SessionTracker, crashed: Bool) -> [SessionUpdate] {
        var updates: [SessionUpdate] = []
        tracker.begin(previousRunCrashed: crashed) { updates.append($0) }
        return updates
    }

    func previous(errors: Int = 0) -> SessionState {
        SessionState(
            sid: UUID(), did: "install-1", started: clock.now.addingTimeInterval(-600), release: "com.example.app@1.3.0",
            environment: nil, seq: errors > 0 ? 1 : 0, errors: errors)
    }

    @Test("a first run starts one session: init, ok, seq 0, the install id, release and environment; its state is stored")
    func firstRun() throws {
        let storage = InMemorySessionStorage()
        let tracker = tracker(storage)
        let updates = begin(tracker, crashed: false)
        #expect(updates.count == 1)
        let update = try #require(updates.first)
        #expect(update.isInit && update.status == .ok && update.seq == 0 && update.errors == 0)
        #expect(update.did == "install-1" && update.started == clock.now)
        #expect(update.attrs == .init(release: "com.example.app@1.4.0", environment: "staging"))
        #expect(storage.state?.sid == update.sid && tracker.sid == update.sid)
    }

    @Test("the previous run's unfinished session ends crashed when that run left a crash record, first")
    func previousCrashed() throws {
        let old = previous(errors: 3)
        let storage = InMemorySessionStorage(old)
        let updates = begin(tracker(storage), crashed: true)
        #expect(updates.map(\.status) == [.crashed, .ok])
        let final = try #require(updates.first)
        // Its own release, start and install id, not this run's; the next seq; not init.
        #expect(final.sid == old.sid && final.started == old.started && final.seq == 2 && !final.isInit)
        #expect(final.attrs.release == "com.example.app@1.3.0" && final.errors == 3)
        #expect(updates[1].sid != old.sid && storage.state?.sid == updates[1].sid)
    }

    @Test("the previous run's unfinished session ends abnormal when it left no crash record (killed, power loss)")
    func previousAbnormal() {
        let old = previous()
        let updates = begin(tracker(InMemorySessionStorage(old)), crashed: false)
        #expect(updates.map(\.status) == [.abnormal, .ok])
        #expect(updates[0].sid == old.sid && updates[0].seq == 1)
    }

    @Test("a clean end is exited with the session's duration, and leaves nothing for the next start")
    func cleanEnd() throws {
        let storage = InMemorySessionStorage()
        let tracker = tracker(storage)
        let first = try #require(begin(tracker, crashed: false).first)
        clock.advance(by: 42)
        var ended: [SessionUpdate] = []
        tracker.end { ended.append($0) }
        #expect(ended.map(\.status) == [.exited])
        #expect(ended[0].sid == first.sid && ended[0].seq == 1 && ended[0].duration == 42 && ended[0].errors == 0)
        #expect(storage.state == nil && tracker.sid == nil)
        tracker.end { ended.append($0) }
        #expect(ended.count == 1, "ending twice sends one update")
        // The next run finds no unfinished session: nothing crashed or abnormal.
        #expect(
            begin(SessionTracker(release: "a@1", environment: nil, did: nil, clock: clock, storage: storage), crashed: true).map(\.status) == [.ok])
    }

    @Test("guard errors: the first gives an ok update with errors 1 and is stored; the end carries them all (errored)")
    func errors() throws {
        let storage = InMemorySessionStorage()
        let tracker = tracker(storage)
        _ = begin(tracker, crashed: false)
        let first = try #require(tracker.recordError())
        #expect(first.status == .ok && first.errors == 1 && first.seq == 1 && !first.isInit)
        #expect(storage.state?.errors == 1 && storage.state?.seq == 1)
        #expect(tracker.recordError() == nil && tracker.recordError() == nil)
        var ended: [SessionUpdate] = []
        tracker.end { ended.append($0) }
        #expect(ended.map(\.status) == [.exited] && ended[0].errors == 3 && ended[0].seq == 2)
    }

    @Test("an update is delivered before the stored state changes: a crash between them resends, never loses")
    func deliverBeforeStoring() {
        let old = previous()
        let storage = InMemorySessionStorage(old)
        var seenStored: [UUID?] = []
        tracker(storage).begin(previousRunCrashed: false) { _ in seenStored.append(storage.state?.sid) }
        #expect(seenStored.first == old.sid, "the previous session was still stored when its final update was queued")
    }

    @Test("the wire form is what POST /v1/sessions takes: init, lowercase sid, RFC 3339 dates, attrs")
    func wireForm() throws {
        let update = SessionUpdate(
            sid: UUID(uuidString: "7C7B6585-F901-4F7B-9C1B-2B5E1C0D9A10")!, did: "install-1", seq: 0, isInit: true,
            started: Date(timeIntervalSince1970: 1_800_000_000), timestamp: Date(timeIntervalSince1970: 1_800_000_001),
            duration: nil, status: .ok, errors: 0, attrs: .init(release: "com.example.app@1.4.0", environment: nil))
        let object = try #require(try JSONSerialization.jsonObject(with: JSONEncoder.crashWire().encode(update)) as? [String: Any])
        #expect(object["sid"] as? String == "7c7b6585-f901-4f7b-9c1b-2b5e1c0d9a10")
        #expect(object["init"] as? Bool == true)
        #expect(object["started"] as? String == "2027-01-15T08:00:00Z")
        #expect(object["status"] as? String == "ok")
        #expect((object["attrs"] as? [String: Any])?["release"] as? String == "com.example.app@1.4.0")
        #expect(object["duration"] == nil)
    }

    @Test("the file storage survives a reopen and a torn temporary file")
    func fileStorage() throws {
        let directory = reporterTestDirectory()
        let storage = FileSessionStorage(directory: directory)
        #expect(storage.load() == nil)
        let state = previous(errors: 2)
        storage.save(state)
        // A crash while writing the next state leaves a temporary file, never a torn one.
        try Data("{\"sid\":".utf8).write(to: URL(fileURLWithPath: storage.url.path + ".tmp"))
        #expect(FileSessionStorage(directory: directory).load() == state)
        storage.remove()
        #expect(storage.load() == nil)
    }
}
