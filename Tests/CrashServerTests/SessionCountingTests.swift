import Foundation
import NIOCore
import SeededRandom
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The counting table of release-health.md applied to one session, row by row, and the
/// parsing of updates (without a database; ReleaseHealthTests runs the same rows on PostgreSQL).
@Suite struct SessionCountingTests {
    static let now = Date()

    static func update(
        sid: UUID = UUID(uuidString: "7C7B6585-F901-4B34-A6D4-2B1A9E6C1F00")!, seq: Int64 = 1, status: SessionStatus = .ok,
        errors: Int64 = 0, release: String = "com.acme.shop@2.4.0+311"
    ) -> SessionUpdate {
        let (app, version) = SessionRelease.split(release)
        return SessionUpdate(
            sid: sid, did: "user-1", seq: seq, started: now, status: status, errors: errors, duration: nil,
            release: SessionRelease(appID: app, version: version, environment: "production"))
    }

    @Test(arguments: [
        (SessionStatus.ok, Int64(0), SessionStatus?.none), (.exited, 0, .exited), (.exited, 2, .errored), (.errored, 0, .errored),
        (.crashed, 5, .crashed), (.abnormal, 0, .abnormal),
    ])
    func unknownSessionIsStartedAndCountedInItsFinalState(_ status: SessionStatus, _ errors: Int64, _ final: SessionStatus?) {
        var state: SessionState?
        let effect = SessionCounting.apply(Self.update(status: status, errors: errors), to: &state)
        #expect(effect == SessionCounting.Effect(outcome: .accepted, started: true, final: final))
        #expect(state?.status == final ?? .ok)
    }

    @Test func openSessionTakesAFinalStatusWhateverItsSeq() {
        var state: SessionState?
        _ = SessionCounting.apply(Self.update(seq: 10), to: &state)
        let effect = SessionCounting.apply(Self.update(seq: 3, status: .crashed), to: &state)
        #expect(effect == SessionCounting.Effect(outcome: .accepted, started: false, final: .crashed))
    }

    @Test func openSessionKeepsANewerOkAndCountsNothing() {
        var state: SessionState?
        _ = SessionCounting.apply(Self.update(seq: 1), to: &state)
        let effect = SessionCounting.apply(Self.update(seq: 2, errors: 3), to: &state)
        #expect(effect == SessionCounting.Effect(outcome: .accepted))
        #expect(state?.errors == 3)
        #expect(state?.seq == 2)
        // The largest errors of any update makes a later clean exit "errored".
        let exit = SessionCounting.apply(Self.update(seq: 3, status: .exited, errors: 0), to: &state)
        #expect(exit.final == .errored)
    }

    @Test(arguments: [Int64(1), 0])
    func openSessionIgnoresAnOkThatIsNotNewer(_ seq: Int64) {
        var state: SessionState?
        _ = SessionCounting.apply(Self.update(seq: 1), to: &state)
        let effect = SessionCounting.apply(Self.update(seq: seq, errors: 9), to: &state)
        #expect(effect == SessionCounting.Effect(outcome: .duplicate))
        #expect(state?.errors == 0)
    }

    @Test(arguments: [SessionStatus.ok, .exited, .crashed, .errored, .abnormal])
    func finalSessionIgnoresEverything(_ status: SessionStatus) {
        var state: SessionState?
        _ = SessionCounting.apply(Self.update(seq: 1, status: .exited), to: &state)
        let before = state
        let effect = SessionCounting.apply(Self.update(seq: 99, status: status, errors: 4), to: &state)
        #expect(effect == SessionCounting.Effect(outcome: .duplicate))
        #expect(state == before)
    }

    /// Sessions are locked in PostgreSQL's uuid order (bytes, which the hex text also sorts by).
    @Test func sidsSortInByteOrder() {
        let ids = (0..<200).map { _ in UUID() }
        #expect(ids.sorted(by: PostgresSessionStore.uuidPrecedes) == ids.sorted { $0.uuidString < $1.uuidString })
    }

    @Test func releasesSplitAsTheSentryDoor() {
        #expect(SessionRelease.split("com.acme.shop@2.4.0+311") == ("com.acme.shop", "2.4.0"))
        #expect(SessionRelease.split("2.4.0+311") == ("unknown", "2.4.0"))
        #expect(SessionRelease.split("2.4.0") == ("unknown", "2.4.0"))
        #expect(SessionRelease.split("a@b@c") == ("a", "b@c"))
    }

    static func parse(_ object: [String: Any], requireSID: Bool = true) -> Result<SessionUpdate, SessionFieldError> {
        let data = try! JSONSerialization.data(withJSONObject: object)
        return SessionUpdate.parse(SessionJSON.decode(Array(data))!, now: now, requireSID: requireSID)
    }

    static var valid: [String: Any] {
        [
            "sid": "7c7b6585f9014b34a6d42b1a9e6c1f00", "did": "u1", "init": true, "started": RFC3339Text.now(),
            "status": "ok", "attrs": ["release": "app@1.0", "environment": "staging", "ip_address": "{{auto}}"],
            "abnormal_mechanism": "anr_foreground",
        ]
    }

    @Test func aValidUpdateParsesWithItsDefaults() throws {
        let update = try Self.parse(Self.valid).get()
        #expect(update.sid == UUID(uuidString: "7C7B6585-F901-4B34-A6D4-2B1A9E6C1F00"))
        #expect(update.seq == 0)
        #expect(update.release == SessionRelease(appID: "app", version: "1.0", environment: "staging"))
        var noInit = Self.valid
        noInit["init"] = nil
        noInit["status"] = "unhandled"
        let later = try Self.parse(noInit).get()
        #expect(later.status == .errored)
        #expect(abs(Double(later.seq) - Self.now.timeIntervalSince1970 * 1000) < 1000)
        var noEnvironment = Self.valid
        noEnvironment["attrs"] = ["release": "1.0"]
        #expect(try Self.parse(noEnvironment).get().release.environment == "production")
        noEnvironment["did"] = ""
        #expect(try Self.parse(noEnvironment).get().did == nil)
    }

    /// (field, its value as JSON text or nil for absent, the field the error names).
    @Test(
        arguments: [
            ("sid", nil, "sid"), ("sid", "\"nope\"", "sid"), ("did", "\"\(String(repeating: "d", count: 129))\"", "did"),
            ("seq", "-1", "seq"), ("seq", "1.5", "seq"), ("init", "\"yes\"", "init"), ("started", nil, "started"),
            ("started", "\"yesterday\"", "started"), ("started", "\"2001-01-01T00:00:00Z\"", "started"),
            ("timestamp", "\"later\"", "timestamp"), ("duration", "-2", "duration"), ("status", "\"fine\"", "status"),
            ("errors", "-1", "errors"), ("attrs", nil, "attrs"), ("attrs", "{\"environment\": \"x\"}", "attrs.release"),
            ("attrs", "{\"release\": \"\"}", "attrs.release"),
            ("attrs", "{\"release\": \"\(String(repeating: "r", count: 201))\"}", "attrs.release"),
            ("attrs", "{\"release\": \"1\", \"environment\": \"\"}", "attrs.environment"),
        ] as [(String, String?, String)])
    func anInvalidFieldIsNamed(_ field: String, _ value: String?, _ named: String) {
        var object = Self.valid
        object[field] = value.map { try! JSONSerialization.jsonObject(with: Data($0.utf8), options: .fragmentsAllowed) }
        guard case .failure(let error) = Self.parse(object) else {
            Issue.record("\(field) = \(String(describing: value)) was accepted")
            return
        }
        #expect(error.message.hasPrefix(named + ":"), "\(error.message)")
    }

    @Test func sentryDoorGivesAMissingSidAFreshOne() throws {
        var object = Self.valid
        object["sid"] = nil
        let a = try Self.parse(object, requireSID: false).get()
        let b = try Self.parse(object, requireSID: false).get()
        #expect(a.sid != b.sid)
    }

    @Test func aggregatesDropInvalidEntriesAndNeedARelease() {
        let item: [String: Any] = [
            "attrs": ["release": "app@3.0"],
            "aggregates": [
                ["started": RFC3339Text.now(), "exited": 3, "crashed": 1, "did": "u"],
                ["started": "2001-01-01T00:00:00Z", "exited": 1],
                ["started": RFC3339Text.now(), "errored": -1],
            ],
        ]
        let parsed = SessionAggregate.parse(SessionJSON.decode(Array(try! JSONSerialization.data(withJSONObject: item)))!, now: Self.now)
        #expect(parsed.count == 1)
        #expect(parsed.first?.sessions == 4)
        var noRelease = item
        noRelease["attrs"] = [:]
        let none = SessionAggregate.parse(
            SessionJSON.decode(Array(try! JSONSerialization.data(withJSONObject: noRelease)))!, now: Self.now)
        #expect(none.isEmpty)
    }

    /// The hashes of users `user-0` to `user-19999`, computed once for the suite.
    static let userHashes = (0..<20_000).map { SessionCounting.userHash("user-\($0)") }

    /// The stored users: hashes up to 250, a sketch beyond (sparse, then dense once that is
    /// smaller), each read back as the same set; merging is a union, so merging twice changes nothing.
    @Test(arguments: [0, 250, 251, 3000, 20_000])
    func storedUsersReadBackAndMergeOnce(_ n: Int) {
        let users = SessionUsers(Array(Self.userHashes[0..<n]))
        let bytes = users.encoded
        #expect(bytes.readableBytesView.first == (n <= 250 ? 0 : n < 5000 ? 1 : 2))
        #expect(SessionUsers(encoded: bytes) == users)
        #expect(users.isSketch == (n > 250))
        if n <= 250 { #expect(users.count == Int64(n)) }
        var twice = users
        twice.merge(users)
        twice.merge(encoded: bytes)
        #expect(twice == users)
        // Two halves merged are the whole, whichever side was a sketch.
        var half = SessionUsers(Array(Self.userHashes[0..<n / 2]))
        half.merge(encoded: SessionUsers(Array(Self.userHashes[n / 2..<n])).encoded)
        #expect(half.count == users.count)
    }

    @Test(arguments: [300, 1000, 20_000])
    func theUserSketchIsWithinTwoPercent(_ n: Int) {
        var sketch = UserSketch()
        for i in 0..<n { sketch.insert(SessionCounting.userHash("user-\(n)-\(i)")) }
        let error = abs(Double(sketch.estimate - Int64(n))) / Double(n)
        #expect(error < 0.02, "estimate \(sketch.estimate) for \(n)")
    }

    /// The estimate sums 2^-rank in fixed point while every rank is at most 38: the same sum,
    /// hence the same count, as adding the powers one by one in floating point, whatever the
    /// ranks (higher ones, of 1024 device registers or 16,384 user registers).
    @Test(arguments: [(1024, 12), (16_384, 30), (16_384, 38), (16_384, 39), (16_384, 255), (1024, 60)])
    func theEstimateSumsAsFloatingPointDoes(_ count: Int, _ highest: Int) {
        let seed = UInt64.random(in: .min ... .max)
        var generator = SplitMix64(seed: seed)
        for fill in [0.05, 0.5, 1.0] {
            let registers = (0..<count).map { _ in
                Double.random(in: 0..<1, using: &generator) < fill ? UInt8.random(in: 1...UInt8(highest), using: &generator) : 0
            }
            let m = Double(count)
            var sum = 0.0
            for rank in registers { sum += 1 / pow(2, Double(rank)) }
            let zeros = registers.filter { $0 == 0 }.count
            let raw = 0.7213 / (1 + 1.079 / m) * m * m / sum
            let expected =
                raw <= 2.5 * m && zeros > 0 ? Int64((m * log(m / Double(zeros))).rounded()) : Int64(raw.rounded())
            #expect(HyperLogLog.estimate(registers) == expected, "\(count) registers up to rank \(highest), fill \(fill), seed \(seed)")
        }
    }
}

/// RFC 3339 text of the current time, for test bodies.
enum RFC3339Text {
    static func now(offset: TimeInterval = 0) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date().addingTimeInterval(offset))
    }
}
