import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `DATABASE_READ_URL` (issue 21): routing reads to a standby, falling back to the primary.
/// Real streaming replication is exercised by `scripts/fault-suite --replicas 2 --standby`
/// (scripts/test.d/65-replica-smoke); these run on the test database alone.
@Suite struct ReadReplicaTests {
    @Test func walPositionsParseCompareAndPrint() throws {
        let a = try #require(WALPosition("0/3016208"))
        let b = try #require(WALPosition("16/B374D848"))
        #expect(a.value == 0x3016208)
        #expect(b.value == 0x16_B374_D848)
        #expect(a < b)
        #expect(b.description == "16/B374D848")
        #expect(WALPosition(b.description) == b)
        for bad in ["", "0", "/1", "1/", "x/1", "1/2/3", "123456789/0", "0/-1"] { #expect(WALPosition(bad) == nil, "\(bad)") }
    }

    private func reader(maxLag: Duration = .seconds(5)) throws -> ReadReplica {
        try ReadReplica(
            url: "postgres://nobody@127.0.0.1:1/none?sslmode=disable", poolSize: 1, maxLag: maxLag, logger: TestEnvironment.logger)
    }

    @Test func readsAvoidAStandbyThatIsDownLaggingOrBehindAWrite() async throws {
        let r = try reader(maxLag: .milliseconds(100))
        // Never polled: unknown, so not used.
        #expect(r.reasonToAvoid(mustSee: nil) == .unreachable)
        let p100 = WALPosition(value: 100), p200 = WALPosition(value: 200), p300 = WALPosition(value: 300)
        r.record(primary: p100, inRecovery: true, replay: p100, lastReplayAge: 30)
        #expect(r.reasonToAvoid(mustSee: nil) == nil)
        #expect(r.current.lagSeconds == 0)
        // A client that saw a write at 200 reads on the primary until the standby replays it.
        #expect(r.reasonToAvoid(mustSee: p200) == .readAfterWrite)
        #expect(r.reasonToAvoid(mustSee: p100) == nil)
        // A write on this server: every read here waits for it.
        r.noteWrite(p200)
        #expect(r.reasonToAvoid(mustSee: nil) == .readAfterWrite)
        try await Task.sleep(for: .milliseconds(250))
        // The primary moved on to 300 while the standby stayed at 100 for 250 ms: lagging,
        // bounded by the age of its last replayed transaction when that is smaller.
        r.record(primary: p300, inRecovery: true, replay: p100, lastReplayAge: 30)
        #expect(r.current.lagSeconds >= 0.2)
        #expect(r.current.lagBytes == 200)
        #expect(r.reasonToAvoid(mustSee: nil) == .lagging)
        r.record(primary: p300, inRecovery: true, replay: p200, lastReplayAge: 0.01)
        #expect(r.current.lagSeconds <= 0.01)
        #expect(r.reasonToAvoid(mustSee: nil) == nil)  // the write at 200 is replayed
        r.recordDown(CancellationError())
        #expect(r.reasonToAvoid(mustSee: nil) == .unreachable)
        // A read URL on a server that is not in recovery (a promoted standby): no lag.
        r.record(primary: p300, inRecovery: false, replay: nil, lastReplayAge: nil)
        #expect(r.reasonToAvoid(mustSee: p300) == nil)
    }

    /// The middleware's plumbing: the position a read must see comes from the header or the
    /// cookie (the later of both; garbage ignored), and a write's position goes out in the
    /// header, plus the cookie outside the REST API.
    @Test func readAfterTravelsInTheHeaderAndTheDashboardCookie() async throws {
        let router = Router(context: CrashRequestContext.self)
        router.add(middleware: ReadAfterMiddleware(enabled: true))
        for path in ["/v1/write", "/dash/write"] {
            router.post(RouterPath(path)) { _, _ in
                ReadAfter.written?.record(WALPosition(value: 0x2_0000_0010))
                ReadAfter.written?.record(WALPosition(value: 0x1_0000_0000))  // an older one does not win
                return "ok"
            }
        }
        router.get("/read") { _, _ in ReadAfter.position?.description ?? "none" }
        let app = Application(router: router, logger: TestEnvironment.logger)
        let name = HTTPField.Name("CrashGuard-Read-After")!
        try await app.test(.router) { client in
            let api = try await client.execute(uri: "/v1/write", method: .post)
            #expect(api.headers[name] == "2/10")
            #expect(api.headers[.setCookie] == nil)
            let dashboard = try await client.execute(uri: "/dash/write", method: .post)
            #expect(dashboard.headers[name] == "2/10")
            #expect(dashboard.headers[.setCookie]?.hasPrefix("crashguard_read_after=2/10;") == true)
            #expect(String(buffer: try await client.execute(uri: "/read", method: .get).body) == "none")
            let byHeader = try await client.execute(uri: "/read", method: .get, headers: [name: "3/0"])
            #expect(String(buffer: byHeader.body) == "3/0")
            let both = try await client.execute(
                uri: "/read", method: .get, headers: [name: "3/0", .cookie: "crashguard_read_after=4/1"])
            #expect(String(buffer: both.body) == "4/1")
            let garbage = try await client.execute(uri: "/read", method: .get, headers: [name: "DROP TABLE"])
            #expect(String(buffer: garbage.body) == "none")
        }
    }

    @Test func configurationReadsTheReadURLAndRefusesABadOne() throws {
        let config = try ServerConfiguration(environment: ["DATABASE_READ_URL": "postgres://r@standby:5433/db", "CRASHGUARD_READ_MAX_LAG": "2.5"])
        #expect(config.databaseReadURL == "postgres://r@standby:5433/db")
        #expect(config.readMaxLag == .seconds(2.5))
        #expect(ServerConfiguration().databaseReadURL.isEmpty)
        var bad = TestEnvironment.configuration()
        bad.databaseReadURL = "mysql://x"
        #expect(throws: ConfigurationError.self) { try CrashDatabase(configuration: bad, logger: TestEnvironment.logger) }
        bad.databaseReadURL = ""
        bad.readMaxLag = .seconds(0)
        #expect(throws: ConfigurationError.self) { try bad.validate() }
    }

    /// The standby is gone (nothing listens on its port): list, detail, stats and triage all
    /// answer from the primary, and `/metrics` and `/healthz` say so.
    @Test func aStandbyThatIsDownFallsBackToThePrimary() async throws {
        let p = try await makeProject()
        let config = TestEnvironment.configuration { $0.databaseReadURL = "postgres://crashguard@127.0.0.1:1/crashguard?sslmode=disable" }
        try await withApp(config) { client in
            try await client.send([queryReport("fallback", at: Date())], key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(list.status == .ok)
            let id = try #require(list.json.groups.first?["id"] as? String)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken).status == .ok)
            #expect(try await client.query("/v1/projects/\(p.project)/stats", token: p.readToken).status == .ok)
            let triage = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken, method: .patch, body: #"{"status":"resolved"}"#)
            #expect(triage.status == .ok)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(buffer: metrics.body)
            #expect(text.contains(#"crashguard_read_fallbacks_total{reason="unreachable"} "#))
            #expect(!text.contains(#"crashguard_read_fallbacks_total{reason="unreachable"} 0"#))
            #expect(text.contains("crashguard_read_replica_up 0"))
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok)
            #expect(String(buffer: health.body).contains(#""readReplica":{"up":false"#))
        }
    }

    /// A read URL that answers (here the test database itself, not in recovery): reads go
    /// there, a triage answers with the position to read after, and the triage shows at once.
    @Test func readsGoToTheReadURLAndTriageAnswersItsPosition() async throws {
        let p = try await makeProject()
        let config = TestEnvironment.configuration { $0.databaseReadURL = TestEnvironment.databaseURL }
        try await withApp(config) { client in
            try await client.send([queryReport("routed", at: Date())], key: p.ingestKey)
            // The monitor's first poll marks the reader up.
            var up = false
            for _ in 0..<100 where !up {
                up = String(buffer: try await client.execute(uri: "/healthz", method: .get).body).contains(#""up":true"#)
                if !up { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(up)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let response = try await client.execute(
                uri: "/v1/projects/\(p.project)/crashes/\(id)", method: .patch,
                headers: [.authorization: "Bearer \(p.readToken)", .contentType: "application/json"],
                body: ByteBuffer(string: #"{"status":"ignored"}"#))
            #expect(response.status == .ok)
            let position = try #require(response.headers[HTTPField.Name("CrashGuard-Read-After")!])
            #expect(WALPosition(position) != nil)
            let detail = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(detail.json["status"] as? String == "ignored")
            let text = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            let standbyReads = text.split(separator: "\n").first { $0.hasPrefix(#"crashguard_reads_total{target="standby"}"#) }
            #expect(standbyReads.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0 >= 1)
        }
    }
}
