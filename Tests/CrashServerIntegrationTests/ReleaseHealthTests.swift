import CodecTestSupport
import CrashCompression
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Release health against the real PostgreSQL (release-health.md): every row of the counting
/// table through `POST /v1/sessions`, the door's errors, the Sentry `session`/`sessions` items,
/// both doors on one session, concurrent requests on one `sid`, and the releases queries with
/// their parameters.
@Suite struct ReleaseHealthTests {
    /// Ten minutes into the hour three hours ago: whole hours of the rollup around it.
    static let hour = TimeWindow.floor(Date().addingTimeInterval(-3 * 3600), TimeWindow.hour)
    static let base = hour.addingTimeInterval(600)
    /// A window of whole hours around `base`.
    static var window: String { "from=\(RFC3339.format(hour.addingTimeInterval(-3600)))&to=\(RFC3339.format(hour.addingTimeInterval(7200)))" }

    static func sid(_ n: Int) -> String { String(format: "7c7b6585-f901-4b34-a6d4-%012x", n) }

    static func session(
        _ sid: String, status: String? = "ok", seq: Int? = 1, errors: Int? = nil, did: String? = "user-1",
        release: String = "com.acme.shop@2.4.0", environment: String? = nil, started: Date = base, initial: Bool? = nil
    ) -> [String: Any] {
        var attrs: [String: Any] = ["release": release]
        if let environment { attrs["environment"] = environment }
        var object: [String: Any] = ["sid": sid, "started": RFC3339.format(started), "attrs": attrs]
        if let status { object["status"] = status }
        if let seq { object["seq"] = seq }
        if let errors { object["errors"] = errors }
        if let did { object["did"] = did }
        if let initial { object["init"] = initial }
        return object
    }

    static func body(_ sessions: [Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["sessions": sessions]))
    }

    // MARK: - The counting table on PostgreSQL

    /// A scenario: requests of updates (by session number), the (accepted, duplicates) of each,
    /// and the release's final (sessions, crashed, errored, abnormal).
    struct Scenario: Sendable, CustomTestStringConvertible {
        var name: String
        var requests: [[(Int, [String: any Sendable])]]
        var answers: [(Int, Int)]
        var totals: (Int64, Int64, Int64, Int64)
        var testDescription: String { name }
    }

    static let scenarios: [Scenario] = [
        Scenario(name: "unknown ok: started, healthy", requests: [[(1, ["status": "ok"])]], answers: [(1, 0)], totals: (1, 0, 0, 0)),
        Scenario(name: "unknown crashed", requests: [[(1, ["status": "crashed", "errors": 3])]], answers: [(1, 0)], totals: (1, 1, 0, 0)),
        Scenario(name: "unknown exited with errors", requests: [[(1, ["status": "exited", "errors": 2])]], answers: [(1, 0)], totals: (1, 0, 1, 0)),
        Scenario(name: "unknown exited clean", requests: [[(1, ["status": "exited"])]], answers: [(1, 0)], totals: (1, 0, 0, 0)),
        Scenario(name: "unknown errored", requests: [[(1, ["status": "errored"])]], answers: [(1, 0)], totals: (1, 0, 1, 0)),
        Scenario(name: "unknown unhandled", requests: [[(1, ["status": "unhandled"])]], answers: [(1, 0)], totals: (1, 0, 1, 0)),
        Scenario(name: "unknown abnormal", requests: [[(1, ["status": "abnormal"])]], answers: [(1, 0)], totals: (1, 0, 0, 1)),
        Scenario(
            name: "open, final with a lower seq", requests: [[(1, ["seq": 10])], [(1, ["status": "crashed", "seq": 1])]],
            answers: [(1, 0), (1, 0)], totals: (1, 1, 0, 0)),
        Scenario(
            name: "open, newer ok keeps errors",
            requests: [[(1, ["seq": 1])], [(1, ["seq": 2, "errors": 1])], [(1, ["status": "exited", "seq": 3])]],
            answers: [(1, 0), (1, 0), (1, 0)], totals: (1, 0, 1, 0)),
        Scenario(
            name: "open, retried ok", requests: [[(1, ["seq": 4])], [(1, ["seq": 4])]], answers: [(1, 0), (0, 1)], totals: (1, 0, 0, 0)),
        Scenario(
            name: "open, late ok", requests: [[(1, ["seq": 5])], [(1, ["seq": 3, "errors": 7])], [(1, ["status": "exited", "seq": 6])]],
            answers: [(1, 0), (0, 1), (1, 0)], totals: (1, 0, 0, 0)),
        Scenario(
            name: "final, then anything",
            requests: [[(1, ["status": "exited"])], [(1, ["status": "crashed", "seq": 9])], [(1, ["seq": 10])], [(1, ["status": "exited"])]],
            answers: [(1, 0), (0, 1), (0, 1), (0, 1)], totals: (1, 0, 0, 0)),
        Scenario(
            name: "init on every update counts once",
            requests: [[(1, ["init": true, "seq": 0])], [(1, ["init": true, "seq": 0, "status": "abnormal"])]],
            answers: [(1, 0), (1, 0)], totals: (1, 0, 0, 1)),
        Scenario(
            name: "one request, in array order",
            requests: [[(1, ["seq": 1]), (1, ["seq": 2, "status": "crashed"]), (1, ["seq": 3, "status": "exited"]), (2, ["seq": 1])]],
            answers: [(3, 1)], totals: (2, 1, 0, 0)),
        Scenario(
            name: "sid with or without dashes, any case",
            requests: [[(1, ["seq": 1])], [(-1, ["status": "crashed"])]], answers: [(1, 0), (1, 0)], totals: (1, 1, 0, 0)),
    ]

    @Test(arguments: scenarios)
    func countingTableRow(_ scenario: Scenario) async throws {
        let project = try await makeProject()
        try await withApp { client in
            for (request, expected) in zip(scenario.requests, scenario.answers) {
                let sessions: [Any] = request.map { n, fields in
                    // Session -1 is session 1 written upper-case without dashes.
                    let sid = n == -1 ? Self.sid(1).replacingOccurrences(of: "-", with: "").uppercased() : Self.sid(n)
                    var object = Self.session(sid)
                    for (key, value) in fields { object[key] = value }
                    return object
                }
                let response = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
                #expect(response.status == .accepted, "\(scenario.name)")
                let answer = try response.json()
                #expect(answer["accepted"] as? Int == expected.0, "\(scenario.name): \(answer)")
                #expect(answer["duplicates"] as? Int == expected.1, "\(scenario.name): \(answer)")
                #expect((answer["rejected"] as? [Any])?.isEmpty == true)
            }
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == scenario.totals.0, "\(scenario.name)")
            #expect(release["crashedSessions"] as? Int64 == scenario.totals.1, "\(scenario.name)")
            #expect(release["erroredSessions"] as? Int64 == scenario.totals.2, "\(scenario.name)")
            #expect(release["abnormalSessions"] as? Int64 == scenario.totals.3, "\(scenario.name)")
        }
    }

    @Test func attributesAreFixedByTheFirstUpdate() async throws {
        let project = try await makeProject()
        try await withApp { client in
            _ = try await client.postSessions(key: project.ingestKey, Self.body([Self.session(Self.sid(1), did: "first")]))
            // A later update naming another release, user and start changes none of them.
            let later = Self.session(
                Self.sid(1), status: "crashed", did: "second", release: "com.acme.shop@9.9.9", environment: "staging",
                started: Self.base.addingTimeInterval(60))
            _ = try await client.postSessions(key: project.ingestKey, Self.body([later]))
            let list = try await client.releases(project, Self.window)
            #expect(list.map { $0["version"] as? String } == ["2.4.0"])
            #expect(list.first?["crashedSessions"] as? Int64 == 1)
            #expect(list.first?["crashedUsers"] as? Int64 == 1)
            #expect(list.first?["users"] as? Int64 == 1)
            let staging = try await client.releases(project, Self.window + "&environment=staging")
            #expect(staging.isEmpty)
        }
    }

    @Test func concurrentRequestsOnOneSidCountOnce() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let answers = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                for i in 0..<16 {
                    group.addTask {
                        let status = i % 2 == 0 ? "crashed" : "ok"
                        let response = try await client.postSessions(
                            key: project.ingestKey, Self.body([Self.session(Self.sid(1), status: status, seq: i)]))
                        let json = try response.json()
                        return (json["accepted"] as? Int ?? -1, json["duplicates"] as? Int ?? -1)
                    }
                }
                return try await group.reduce(into: [(Int, Int)]()) { $0.append($1) }
            }
            #expect(answers.allSatisfy { $0.0 + $0.1 == 1 })
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 1)
            #expect(release["crashedSessions"] as? Int64 == 1)
        }
    }

    // MARK: - The /v1/sessions door

    @Test func invalidUpdatesAreRejectedByIndexAndTheOthersApplied() async throws {
        let project = try await makeProject()
        try await withApp { client in
            var noSid = Self.session(Self.sid(2))
            noSid["sid"] = nil
            var badStarted = Self.session(Self.sid(3))
            badStarted["started"] = RFC3339.format(Date().addingTimeInterval(-40 * 86_400))
            let sessions: [Any] = [
                Self.session(Self.sid(1)), noSid, 5, Self.session(Self.sid(4), status: "sleeping"), badStarted,
                Self.session(Self.sid(5), release: ""), Self.session(Self.sid(6), errors: -3),
            ]
            let response = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
            #expect(response.status == .accepted)
            let answer = try response.json()
            #expect(answer["accepted"] as? Int == 1)
            #expect(answer["duplicates"] as? Int == 0)
            let rejected = (answer["rejected"] as? [[String: Any]]) ?? []
            #expect(rejected.map { $0["index"] as? Int } == [1, 2, 3, 4, 5, 6])
            let fields = rejected.map { ($0["error"] as? String ?? "").split(separator: ":").first.map(String.init) }
            #expect(fields == ["sid", "session", "status", "started", "attrs.release", "errors"])
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 1)
        }
    }

    @Test func theDoorAnswersAsReportsDo() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration { $0.maxBodyBytes = 64 * 1024 }
        try await withApp(config) { client in
            let body = Self.body([Self.session(Self.sid(1))])
            #expect(try await client.postSessions(key: nil, body).status == .unauthorized)
            #expect(try await client.postSessions(key: "cgi_nope", body).status == .unauthorized)
            #expect(try await client.postSessions(key: project.readToken, body).status == .unauthorized)
            #expect(try await client.postSessions(key: project.ingestKey, body, contentType: nil).status == .unsupportedMediaType)
            #expect(try await client.postSessions(key: project.ingestKey, body, contentType: "text/plain").status == .unsupportedMediaType)
            #expect(try await client.postSessions(key: project.ingestKey, body, encoding: "lzma").status == .unsupportedMediaType)
            for bad in ["", "not json", "[]", "{\"sessions\": {}}", "{\"sessions\": []}", "{\"other\": 1}"] {
                let response = try await client.postSessions(key: project.ingestKey, Array(bad.utf8), encoding: nil)
                #expect(response.status == .badRequest, "\(bad)")
                #expect(response.errorMessage?.isEmpty == false)
            }
            let many = Self.body((0...1000).map { Self.session(Self.sid($0)) })
            let tooMany = try await client.postSessions(key: project.ingestKey, many, encoding: "gzip")
            #expect(tooMany.status == .badRequest)
            let deep = Array((String(repeating: "[", count: 40) + String(repeating: "]", count: 40)).utf8)
            #expect(try await client.postSessions(key: project.ingestKey, deep, encoding: nil).status == .badRequest)
            let large = Array(repeating: UInt8(ascii: " "), count: 70_000) + body
            #expect(try await client.postSessions(key: project.ingestKey, large, encoding: nil).status == .contentTooLarge)
            for (i, encoding) in ["gzip", "deflate", "br", "zstd", "identity"].enumerated() {
                let one = Self.body([Self.session(Self.sid(10 + i))])
                let response = try await client.postSessions(key: project.ingestKey, one, encoding: encoding)
                #expect(response.status == .accepted, "\(encoding)")
            }
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 5)
        }
    }

    /// Bodies of millions of values within the size limits are refused at once, by a count of
    /// their values before any decoding.
    @Test func hostileBodiesAreAnsweredQuickly() async throws {
        let project = try await makeProject()
        let zeros = String(repeating: "0,", count: 4_000_000) + "0"
        let junk = Array("{\"sessions\":[{\"junk\":[\(zeros)],\"sid\":\"\(Self.sid(1))\"}]}".utf8)
        let long = Array("{\"sessions\":[\(zeros)]}".utf8)
        try await withApp { client in
            for body in [junk, long] {
                let start = ContinuousClock.now
                let cpu = processCPUTime()
                let response = try await client.postSessions(key: project.ingestKey, body, encoding: "gzip")
                let work = processCPUTime() - cpu
                let elapsed = ContinuousClock.now - start
                #expect(response.status == .badRequest)
                // The work, compressing the body included, in CPU time, which a loaded machine
                // does not stretch (the contract: well under a second); the wall clock only
                // against waits.
                #expect(work < .seconds(3), "\(work)")
                #expect(elapsed < .seconds(30), "\(elapsed)")
            }
        }
    }

    /// A lock held past PostgreSQL's lock timeout (half the database deadline) is a 503 with
    /// `Retry-After` that stored nothing; the retry then counts.
    @Test func aLockWaitIs503AndStoresNothing() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration { $0.databaseTimeout = .seconds(2) }
        try await withApp(config) { client in
            let started = try await client.postSessions(key: project.ingestKey, Self.body([Self.session(Self.sid(1))]))
            #expect(started.status == .accepted)
            let crash = Self.body([Self.session(Self.sid(1), status: "crashed", seq: 2), Self.session(Self.sid(2))])
            try await withTestDatabase { db in
                try await db.client.withConnection { connection in
                    try await connection.query("BEGIN", logger: TestEnvironment.logger)
                    try await connection.query(
                        "SELECT 1 FROM session_states WHERE sid = \(UUID(uuidString: Self.sid(1))!) FOR UPDATE",
                        logger: TestEnvironment.logger)
                    let refused = try await client.postSessions(key: project.ingestKey, crash)
                    #expect(refused.status == .serviceUnavailable)
                    #expect(refused.headers[.retryAfter] != nil)
                    try await connection.query("ROLLBACK", logger: TestEnvironment.logger)
                }
            }
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 1)
            #expect(release["crashedSessions"] as? Int64 == 0)
            let retried = try await client.postSessions(key: project.ingestKey, crash)
            #expect(try retried.json()["accepted"] as? Int == 2)
            let after = try await client.release(project, "2.4.0", Self.window)
            #expect(after["sessions"] as? Int64 == 2)
            #expect(after["crashedSessions"] as? Int64 == 1)
        }
    }

    /// The hourly maintenance drops the state of sessions that can no longer change and keeps
    /// their counts (a private database: pruning is server-wide).
    @Test func pruningDropsSessionStateAndKeepsTheCounts() async throws {
        try await withPrivateDatabase("rh_prune") { config in
            let project = try await makeProject(config)
            try await withApp(config) { client in
                let sessions: [Any] = [
                    Self.session(Self.sid(1), status: "crashed"), Self.session(Self.sid(2), started: Date().addingTimeInterval(-60)),
                ]
                _ = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
                let pruned = try await withTestDatabase(config) {
                    try await PostgresSessionStore(database: $0).pruneSessions(before: Self.base.addingTimeInterval(1))
                }
                #expect(pruned == 1)
                let release = try await client.release(
                    project, "2.4.0", "from=\(RFC3339.format(Self.hour))&to=\(RFC3339.format(Date().addingTimeInterval(3600)))")
                #expect(release["sessions"] as? Int64 == 2)
                #expect(release["crashedSessions"] as? Int64 == 1)
                // The pruned session is unknown again: an update would start it anew (updates for
                // it are refused by then: its start is over 30 days old).
                let states = try await withTestDatabase(config) { db in
                    try await db.client.query("SELECT count(*)::bigint FROM session_states", logger: TestEnvironment.logger)
                        .collect().first?.decode(Int64.self)
                }
                #expect(states == 1)
            }
        }
    }

    @Test func metricsCountUpdatesByOutcome() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let body = Self.body([Self.session(Self.sid(1)), Self.session(Self.sid(1)), 3])
            _ = try await client.postSessions(key: project.ingestKey, body)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(buffer: metrics.body)
            for outcome in ["accepted", "duplicate", "rejected"] {
                let line = text.split(separator: "\n").first {
                    $0.hasPrefix("crashguard_session_updates_total") && $0.contains("outcome=\"\(outcome)\"")
                }
                #expect(line.map { $0.hasSuffix(" 1") || !$0.hasSuffix(" 0") } == true, "\(outcome): \(String(describing: line))")
            }
        }
    }

    // MARK: - The Sentry door

    static func envelope(_ items: [(String, [UInt8])], header: [String: Any] = [:]) -> [UInt8] {
        SentryIngestTests.envelope(header: header, items: items.map { (type: $0.0, payload: $0.1) })
    }

    static func json(_ object: Any) -> [UInt8] { Array(try! JSONSerialization.data(withJSONObject: object)) }

    @Test func sentrySessionItemsCountAndInvalidOnesAreDropped() async throws {
        let project = try await makeProject()
        let event = SentryIngestTests.event(release: "com.acme.shop@2.4.0")
        let (eventBytes, eventID) = (Self.json(event), event["event_id"] as? String ?? "")
        try await withApp { client in
            var noRelease = Self.session(Self.sid(3))
            noRelease["attrs"] = ["environment": "production"]
            var noSid = Self.session(Self.sid(4), status: "exited")
            noSid["sid"] = nil
            let items: [(String, [UInt8])] = [
                ("event", eventBytes),
                ("session", Self.json(Self.session(Self.sid(1).replacingOccurrences(of: "-", with: ""), status: "crashed"))),
                ("session", Array("not json".utf8)),
                ("session", Self.json(noRelease)),
                ("session", Self.json(Self.session(Self.sid(5), status: "bogus"))),
                ("session", Self.json(Self.session(Self.sid(6), started: Date().addingTimeInterval(-60 * 86_400)))),
                ("session", Self.json(noSid)),
            ]
            let response = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(project.ingestKey),
                body: Self.envelope(items, header: ["event_id": eventID]))
            #expect(response.status == .ok)
            #expect(try response.json()["id"] as? String == eventID)
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 2)
            #expect(release["crashedSessions"] as? Int64 == 1)
        }
        #expect(try await SentryIngestTests().storedReports(project.project).count == 1)
    }

    @Test func aSessionsOnlyEnvelopeAnswersEmptyAfterCommitAndAggregatesCount() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let aggregates: [String: Any] = [
                "attrs": ["release": "com.acme.shop@2.4.0", "environment": "production"],
                "aggregates": [
                    ["started": RFC3339.format(Self.base), "exited": 5, "errored": 2, "crashed": 1, "did": "agg-user"],
                    ["started": RFC3339.format(Self.base), "abnormal": 1],
                    ["started": "not a date", "exited": 100],
                ],
            ]
            let body = Self.envelope(
                [("sessions", Self.json(aggregates)), ("session", Self.json(Self.session(Self.sid(1), did: "u2")))],
                header: ["event_id": "9ec79c33ec9942ab8353589fcb2e04dc"])
            let response = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(project.ingestKey), body: body)
            #expect(response.status == .ok)
            #expect(String(buffer: response.body) == "{}")
            // Committed before the answer: read at once, on another connection.
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 10)
            #expect(release["crashedSessions"] as? Int64 == 1)
            #expect(release["erroredSessions"] as? Int64 == 2)
            #expect(release["abnormalSessions"] as? Int64 == 1)
            #expect(release["users"] as? Int64 == 2)
            #expect(release["crashedUsers"] as? Int64 == 1)
            // A resent aggregate counts again, as in Sentry.
            _ = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(project.ingestKey),
                body: Self.envelope([("sessions", Self.json(aggregates))]))
            #expect(try await client.release(project, "2.4.0", Self.window)["sessions"] as? Int64 == 19)
        }
    }

    @Test func bothDoorsShareOneSession() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let started = try await client.postSessions(key: project.ingestKey, Self.body([Self.session(Self.sid(1), initial: true)]))
            #expect(try started.json()["accepted"] as? Int == 1)
            let compact = Self.sid(1).replacingOccurrences(of: "-", with: "").uppercased()
            let ended = try await client.sentry(
                "/api/\(project.sentryId)/envelope/", headers: SentryIngestTests.auth(project.ingestKey),
                body: Self.envelope([("session", Self.json(Self.session(compact, status: "crashed", seq: 2)))]))
            #expect(ended.status == .ok)
            let retried = try await client.postSessions(
                key: project.ingestKey, Self.body([Self.session(Self.sid(1), status: "crashed", seq: 2)]))
            #expect(try retried.json()["duplicates"] as? Int == 1)
            let release = try await client.release(project, "2.4.0", Self.window)
            #expect(release["sessions"] as? Int64 == 1)
            #expect(release["crashedSessions"] as? Int64 == 1)
        }
    }

    // MARK: - Queries

    /// Version 2.4.0: 3 sessions of 2 users, one crashed (user-1); 2.10.0: 3 sessions of one
    /// user, one errored; 1.0.0: one session without a user, abnormal; staging: one of 2.4.0.
    static func seed(_ client: any TestClientProtocol, _ project: ProjectCredentials) async throws {
        let sessions: [Any] = [
            session(sid(1), status: "crashed", did: "user-1"), session(sid(2), status: "exited", did: "user-1"),
            session(sid(3), did: "user-2"),
            session(sid(4), did: "user-3", release: "com.acme.shop@2.10.0"),
            session(sid(5), status: "errored", did: "user-3", release: "com.acme.shop@2.10.0"),
            session(sid(6), did: "user-3", release: "com.acme.shop@2.10.0", started: base.addingTimeInterval(3600)),
            session(sid(7), status: "abnormal", did: nil, release: "com.acme.shop@1.0.0"),
            session(sid(8), did: "user-9", environment: "staging"),
            session(sid(9), did: "user-9", release: "other.app@2.4.0"),
        ]
        let response = try await client.postSessions(key: project.ingestKey, body(sessions))
        #expect(try response.json()["accepted"] as? Int == 9)
    }

    @Test func theListHasEveryFieldInOrder() async throws {
        let project = try await makeProject()
        try await withApp { client in
            try await Self.seed(client, project)
            // An older session: firstSeen over all time, outside the window.
            let old = Self.session(Self.sid(20), did: "user-1", started: Self.base.addingTimeInterval(-5 * 86_400))
            _ = try await client.postSessions(key: project.ingestKey, Self.body([old]))
            let list = try await client.releases(project, Self.window + "&environment=production&app=com.acme.shop")
            #expect(list.map { $0["version"] as? String } == ["2.10.0", "2.4.0", "1.0.0"])
            let v24 = list[1]
            #expect(v24["sessions"] as? Int64 == 3)
            #expect(v24["crashedSessions"] as? Int64 == 1)
            #expect(v24["erroredSessions"] as? Int64 == 0)
            #expect(v24["users"] as? Int64 == 2)
            #expect(v24["crashedUsers"] as? Int64 == 1)
            #expect(v24["crashFreeSessions"] as? Double == 1 - 1.0 / 3)
            #expect(v24["crashFreeUsers"] as? Double == 0.5)
            #expect(v24["adoption"] as? Double == 3.0 / 7)
            #expect(v24["firstSeen"] as? String == RFC3339.format(Self.base.addingTimeInterval(-5 * 86_400)))
            #expect(v24["lastSeen"] as? String == RFC3339.format(Self.base))
            let v1 = list[2]
            #expect(v1["users"] as? Int64 == 0)
            #expect(v1["crashFreeUsers"] is NSNull)
            #expect(v1["abnormalSessions"] as? Int64 == 1)
            // Without filters, the other app's 2.4.0 and staging's are summed in.
            let all = try await client.releases(project, Self.window)
            #expect(all.first { $0["version"] as? String == "2.4.0" }?["sessions"] as? Int64 == 5)
            let staging = try await client.releases(project, Self.window + "&environment=staging")
            #expect(staging.map { $0["sessions"] as? Int64 } == [1])
        }
    }

    @Test func cursorsWalkEveryReleaseOnce() async throws {
        let project = try await makeProject()
        try await withApp { client in
            try await Self.seed(client, project)
            var seen: [String] = []
            var cursor: String?
            repeat {
                var query = Self.window + "&limit=1&app=com.acme.shop&environment=production"
                if let cursor { query += "&cursor=\(cursor)" }
                let response = try await client.get(project, "releases?" + query)
                #expect(response.status == .ok)
                let json = try response.json()
                seen += ((json["releases"] as? [[String: Any]]) ?? []).compactMap { $0["version"] as? String }
                cursor = json["nextCursor"] as? String
            } while cursor != nil && seen.count < 10
            #expect(seen == ["2.10.0", "2.4.0", "1.0.0"])
        }
    }

    @Test(arguments: [
        "limit=0", "limit=201", "limit=x", "from=yesterday", "to=soon", "cursor=%21%21", "cursor=eyJ4IjoxfQ",
        "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
    ])
    func listParameterErrorsNameTheParameter(_ query: String) async throws {
        let project = try await makeProject()
        try await withApp { client in
            let response = try await client.get(project, "releases?" + query)
            #expect(response.status == .badRequest)
            let name = query.split(separator: "=").first.map(String.init) ?? ""
            #expect(response.errorMessage?.hasPrefix(name) == true, "\(String(describing: response.errorMessage))")
        }
    }

    @Test func readTokensGuardBothQueries() async throws {
        let project = try await makeProject()
        let other = try await makeProject()
        try await withApp { client in
            for path in ["releases", "releases/2.4.0"] {
                let none = try await client.execute(uri: "/v1/projects/\(project.project)/\(path)", method: .get)
                #expect(none.status == .unauthorized)
                let wrong = try await client.execute(
                    uri: "/v1/projects/\(project.project)/\(path)", method: .get, headers: [.authorization: "Bearer cgr_nope"])
                #expect(wrong.status == .unauthorized)
                let foreign = try await client.execute(
                    uri: "/v1/projects/\(project.project)/\(path)", method: .get, headers: [.authorization: "Bearer \(other.readToken)"])
                #expect(foreign.status == .notFound)
            }
            let interval = try await client.get(project, "releases/2.4.0?interval=week")
            #expect(interval.status == .badRequest)
            #expect(interval.errorMessage?.hasPrefix("interval") == true)
        }
    }

    @Test func subHourEdgesCountExactly() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let sessions: [Any] = [
                Self.session(Self.sid(1), started: Self.hour.addingTimeInterval(300)),
                Self.session(Self.sid(2), status: "crashed", started: Self.hour.addingTimeInterval(900)),
                Self.session(Self.sid(3), started: Self.hour.addingTimeInterval(1800)),
                Self.session(Self.sid(4), started: Self.hour.addingTimeInterval(3600 + 300)),
            ]
            _ = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
            let from = RFC3339.format(Self.hour.addingTimeInterval(600))
            let to = RFC3339.format(Self.hour.addingTimeInterval(3600 + 600))
            let release = try await client.release(project, "2.4.0", "from=\(from)&to=\(to)")
            #expect(release["sessions"] as? Int64 == 3)
            #expect(release["crashedSessions"] as? Int64 == 1)
            let inside = try await client.release(
                project, "2.4.0", "from=\(from)&to=\(RFC3339.format(Self.hour.addingTimeInterval(1200)))")
            #expect(inside["sessions"] as? Int64 == 1)
        }
    }

    /// The users of a window's sub-hour edges, read from the sessions themselves (one row per
    /// version, the hashes in arrays): each version its own users, a user with two sessions
    /// counted once, crashed users only from crashed sessions, a session outside not at all.
    @Test func subHourEdgesCountUsersPerVersion() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let at = { (minutes: Double) in Self.hour.addingTimeInterval(minutes * 60) }
            let sessions: [Any] = [
                Self.session(Self.sid(11), status: "exited", did: "a", started: at(15)),
                Self.session(Self.sid(12), status: "crashed", did: "b", started: at(20)),
                Self.session(Self.sid(13), status: "exited", did: "b", started: at(25)),
                Self.session(Self.sid(14), status: "crashed", did: "c", started: at(30)),
                Self.session(Self.sid(15), status: "crashed", did: "a", release: "com.acme.shop@2.3.0", started: at(35)),
                Self.session(Self.sid(16), status: "exited", did: "d", release: "com.acme.shop@2.3.0", started: at(40)),
                Self.session(Self.sid(17), status: "crashed", did: "e", started: at(5)),
            ]
            _ = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
            let window = "from=\(RFC3339.format(at(10)))&to=\(RFC3339.format(at(50)))"
            let rows = try await client.releases(project, window)
            let figures = Dictionary(
                uniqueKeysWithValues: rows.map {
                    ($0["version"] as? String ?? "", [$0["users"] as? Int64, $0["crashedUsers"] as? Int64])
                })
            #expect(figures == ["2.4.0": [3, 2], "2.3.0": [2, 1]])
            let detail = try await client.release(project, "2.4.0", window)
            #expect([detail["users"] as? Int64, detail["crashedUsers"] as? Int64] == [3, 2])
        }
    }

    @Test func theDetailHasItsSeriesAndZeroesForUnknownVersions() async throws {
        let project = try await makeProject()
        try await withApp { client in
            try await Self.seed(client, project)
            let from = Self.hour.addingTimeInterval(-3600)
            let to = Self.hour.addingTimeInterval(7200)
            let detail = try await client.release(project, "2.10.0", Self.window + "&app=com.acme.shop")
            let series = (detail["series"] as? [[String: Any]]) ?? []
            #expect(series.map { $0["t"] as? String } == [from, Self.hour, Self.hour.addingTimeInterval(3600)].map(RFC3339.format))
            #expect(series.map { $0["sessions"] as? Int64 } == [0, 2, 1])
            #expect(series.map { $0["errored"] as? Int64 } == [0, 1, 0])
            // All versions of the app, staging's 2.4.0 included: 8 sessions.
            #expect(detail["adoption"] as? Double == 3.0 / 8)
            let daily = try await client.release(project, "2.10.0", Self.window + "&interval=day&app=com.acme.shop")
            let days = (daily["series"] as? [[String: Any]]) ?? []
            #expect(days.first?["t"] as? String == RFC3339.format(TimeWindow.floor(from, TimeWindow.day)))
            #expect(days.reduce(0) { $0 + ($1["sessions"] as? Int64 ?? 0) } == 3)
            let none = try await client.release(project, "9.9.9", "from=\(RFC3339.format(from))&to=\(RFC3339.format(to))")
            #expect(none["sessions"] as? Int64 == 0)
            #expect(none["crashFreeSessions"] is NSNull)
            #expect(none["adoption"] as? Double == 0)
            #expect(none["firstSeen"] is NSNull)
            #expect(((none["series"] as? [Any]) ?? []).count == 3)
            // A version with characters that need percent-encoding in the path.
            _ = try await client.postSessions(
                key: project.ingestKey, Self.body([Self.session(Self.sid(30), release: "com.acme.shop@3.0 beta/1")]))
            let encoded = try await client.release(project, "3.0%20beta%2F1", Self.window)
            #expect(encoded["version"] as? String == "3.0 beta/1")
            #expect(encoded["sessions"] as? Int64 == 1)
        }
    }

    @Test func topGroupsAndTheGroupsARelease() async throws {
        let project = try await makeProject()
        let now = Date().addingTimeInterval(-3600)
        let old = reportJSON(timestamp: now.addingTimeInterval(-600), reason: "old crash", version: "2.3.0")
        let oldAgain = reportJSON(timestamp: now, reason: "old crash", version: "2.4.0")
        let fresh = (0..<2).map { _ in reportJSON(timestamp: now, reason: "new crash in checkout", version: "2.4.0") }
        let ignored = reportJSON(timestamp: now, reason: "ignored crash", version: "2.4.0")
        let reports = batchBody([old, oldAgain, ignored] + fresh)
        try await withApp { client in
            let response = try await client.ingest(key: project.ingestKey, body: reports)
            #expect(response.status == .accepted)
            let list = try await client.get(project, "crashes?sort=count")
            let groups = (try list.json()["groups"] as? [[String: Any]]) ?? []
            let ignoredID = try #require(groups.first { $0["title"] as? String == "ignored crash" }?["id"] as? String)
            let patch = try await client.execute(
                uri: "/v1/projects/\(project.project)/crashes/\(ignoredID)", method: .patch,
                headers: [.authorization: "Bearer \(project.readToken)", .contentType: "application/json"],
                body: ByteBuffer(string: "{\"status\":\"ignored\"}"))
            #expect(patch.status == .ok)
            let detail = try await client.release(project, "2.4.0", "app=com.example.demo")
            let top = (detail["topGroups"] as? [[String: Any]]) ?? []
            #expect(top.map { $0["title"] as? String } == ["new crash in checkout", "old crash"])
            #expect(top.map { $0["count"] as? Int64 } == [2, 1])
            let introduced = (detail["newGroups"] as? [[String: Any]]) ?? []
            #expect(introduced.map { $0["title"] as? String } == ["new crash in checkout"])
            let older = try await client.release(project, "2.3.0", "")
            #expect(((older["newGroups"] as? [[String: Any]]) ?? []).map { $0["title"] as? String } == ["old crash"])
        }
    }

    @Test(arguments: [250, 400])
    func usersAreExactTo250AndWithinTwoPercentBeyond(_ n: Int) async throws {
        let project = try await makeProject()
        try await withApp { client in
            // Two hours, so the window merges rows; every user crashed once in the second hour.
            let first = (0..<n).map { Self.session(Self.sid($0), did: "user-\($0)") }
            let second = (0..<n).map {
                Self.session(Self.sid(10_000 + $0), status: "crashed", did: "user-\($0)", started: Self.base.addingTimeInterval(3600))
            }
            for chunk in [first, second] {
                let response = try await client.postSessions(key: project.ingestKey, Self.body(chunk), encoding: "gzip")
                #expect(try response.json()["accepted"] as? Int == n)
            }
            let release = try await client.release(project, "2.4.0", Self.window)
            let users = try #require(release["users"] as? Int64)
            let crashed = try #require(release["crashedUsers"] as? Int64)
            if n <= 250 {
                #expect(users == Int64(n))
                #expect(crashed == Int64(n))
            } else {
                #expect(abs(Double(users - Int64(n))) <= 0.02 * Double(n), "\(users)")
                #expect(abs(Double(crashed - Int64(n))) <= 0.02 * Double(n), "\(crashed)")
            }
            #expect(release["sessions"] as? Int64 == Int64(2 * n))
        }
    }
}

extension ReleaseHealthTests {
    /// The dashboard's Releases pages: server-rendered, values of the API, links to the groups.
    @Test func dashboardReleasesPages() async throws {
        let project = try await makeProject()
        let crash = batchBody([reportJSON(timestamp: Date().addingTimeInterval(-1800), reason: "checkout <crash>", version: "2.4.0")])
        try await withApp { client in
            let now = Date().addingTimeInterval(-1800)
            let sessions: [Any] = [
                Self.session(Self.sid(1), status: "crashed", did: "a", release: "com.example.demo@2.4.0", started: now),
                Self.session(Self.sid(2), status: "exited", did: "b", release: "com.example.demo@2.4.0", started: now),
                Self.session(Self.sid(3), did: "c", release: "com.example.demo@2.3.0", environment: "staging", started: now),
            ]
            _ = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
            _ = try await client.ingest(key: project.ingestKey, body: crash)
            let session = try await client.signIn(token: project.readToken, expecting: project.project)
            let list = try await client.page("/projects/\(project.project)/releases", session)
            #expect(list.status == .ok)
            let html = String(buffer: list.body)
            #expect(html.matches(of: /class="release-row"/).count == 2)
            #expect(html.contains(#"href="/projects/\#(project.project)/releases/2.4.0""#))
            #expect(html.contains("50.00 %"))
            #expect(html.contains(#"aria-current="page">Releases"#))
            let staging = try await client.page("/projects/\(project.project)/releases?environment=staging", session)
            #expect(String(buffer: staging.body).matches(of: /class="release-row"/).count == 1)
            let page = try await client.page("/projects/\(project.project)/releases/2.4.0", session)
            #expect(page.status == .ok)
            let detail = String(buffer: page.body)
            #expect(detail.contains(#"<h1 id="release-version">2.4.0</h1>"#))
            #expect(detail.contains(#"id="release-sessions">2<"#))
            #expect(detail.contains("checkout &lt;crash&gt;"))
            #expect(detail.matches(of: /href="\/projects\/[a-z0-9-]+\/crashes\/[0-9]+" class="crash-link"/).count == 2)
            let signedOut = try await client.page("/projects/\(project.project)/releases", nil)
            #expect(signedOut.status == .seeOther)
        }
    }
}

extension ReleaseHealthTests {
    /// The answers match docs/openapi.json's schemas.
    @Test func answersMatchTheOpenAPIDocument() async throws {
        let doc = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        let validator = SchemaValidator(document: doc)
        let project = try await makeProject()
        try await withApp { client in
            let posted = try await client.postSessions(key: project.ingestKey, Self.body([Self.session(Self.sid(1)), 1]))
            try validator.check(posted, path: "/v1/sessions", method: "post", status: "202")
            try await Self.seed(client, project)
            let list = try await client.get(project, "releases?limit=1&" + Self.window)
            try validator.check(list, path: "/v1/projects/{project}/releases", method: "get", status: "200")
            let detail = try await client.get(project, "releases/2.4.0?" + Self.window)
            try validator.check(detail, path: "/v1/projects/{project}/releases/{version}", method: "get", status: "200")
            let bad = try await client.get(project, "releases?limit=0")
            try validator.check(bad, path: "/v1/projects/{project}/releases", method: "get", status: "400")
        }
    }

    /// A cursor after a version of 195 bytes (its release near the 200-byte limit) is accepted back.
    @Test func aCursorAfterALongVersionIsAcceptedBack() async throws {
        let project = try await makeProject()
        let long = String(repeating: "9.", count: 97) + "0"
        try await withApp { client in
            let sessions: [Any] = [
                Self.session(Self.sid(1), release: "app@" + long), Self.session(Self.sid(2), release: "app@" + long),
                Self.session(Self.sid(3), release: "app@1.0"),
            ]
            _ = try await client.postSessions(key: project.ingestKey, Self.body(sessions))
            let first = try await client.get(project, "releases?limit=1&" + Self.window)
            let cursor = try #require(try first.json()["nextCursor"] as? String)
            #expect(cursor.utf8.count > 256)
            let second = try await client.get(project, "releases?limit=1&" + Self.window + "&cursor=" + cursor)
            #expect(second.status == .ok)
            #expect(((try second.json()["releases"] as? [[String: Any]]) ?? []).map { $0["version"] as? String } == ["1.0"])
        }
    }
}

extension TestClientProtocol {
    /// `POST /v1/sessions`.
    func postSessions(
        key: String?, _ body: [UInt8], encoding: String? = nil, contentType: String? = "application/json"
    ) async throws -> TestResponse {
        try await postIngest("/v1/sessions", key: key, body: body, encoding: encoding, contentType: contentType)
    }

    /// `GET /v1/projects/{project}/<path>` with the project's read token.
    func get(_ project: ProjectCredentials, _ path: String) async throws -> TestResponse {
        try await execute(
            uri: "/v1/projects/\(project.project)/\(path)", method: .get, headers: [.authorization: "Bearer \(project.readToken)"])
    }

    /// The releases of the list (200 expected).
    func releases(_ project: ProjectCredentials, _ query: String) async throws -> [[String: Any]] {
        let response = try await get(project, "releases?" + query)
        #expect(response.status == .ok, "\(String(buffer: response.body))")
        return (try response.json()["releases"] as? [[String: Any]]) ?? []
    }

    /// A release's detail (200 expected).
    func release(_ project: ProjectCredentials, _ version: String, _ query: String) async throws -> [String: Any] {
        let response = try await get(project, "releases/\(version)?" + query)
        #expect(response.status == .ok, "\(String(buffer: response.body))")
        return try response.json()
    }
}
