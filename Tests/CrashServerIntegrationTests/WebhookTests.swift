import AsyncHTTPClient
import CrashWire
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOHTTP1
import PostgresNIO
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Alerts: webhooks", against real PostgreSQL and a real HTTP receiver.
/// Serialized: the tests share the delivery timings below, and the SIGKILL test must not
/// have its delivery taken by another test's sender while its server is down.
@Suite("Webhooks", .serialized)
struct WebhookTests {
    /// Fast delivery and retries, so waits stay short; the receivers on 127.0.0.1 allowed.
    static func configuration() -> ServerConfiguration {
        TestEnvironment.configuration { c in
            c.webhooks.allowHosts = ["127.0.0.1"]
            c.webhooks.concurrency = 8
            c.webhooks.pollInterval = .seconds(0.05)
            c.webhooks.retryDelay = .seconds(0.2)
            c.webhooks.retryMaxDelay = .seconds(0.4)
            c.webhooks.timeout = .seconds(5)
            c.publicURL = "https://crash.example.com/"
        }
    }

    @Test("new group and regression are delivered, signed; a retried duplicate queues nothing")
    func newAndRegressed() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        try await withApp(Self.configuration()) { client in
            let json = try await client.createWebhook(p, url: receiver.url("json"), events: ["group.new", "group.regressed"])
            let slack = try await client.createWebhook(p, url: receiver.url("slack"), events: ["group.new"], format: "slack")
            let report = reportJSON(version: "1.0.0")
            for _ in 0..<2 {  // the second is a client's retry: a duplicate
                #expect(try await client.ingest(key: p.ingestKey, body: batchBody([report])).status == .accepted)
            }

            let new = try #require(try await receiver.wait(for: "json", where: { $0.event == "group.new" }).first)
            #expect(new.headers["content-type"] == "application/json")
            #expect(UUID(uuidString: new.delivery ?? "") != nil)
            #expect(verify(new, secret: json.secret))
            #expect(!verify(new, secret: slack.secret))
            let body = try #require(new.json)
            #expect(body["event"] as? String == "group.new")
            #expect(body["project"] as? String == p.project)
            #expect((body["deliveredAt"] as? String).flatMap { RFC3339.parse($0) } != nil)
            let group = try #require(body["group"] as? [String: Any])
            #expect(group["title"] as? String == "-[__NSArrayI objectAtIndex:]: index <n> beyond bounds [<n> .. <n>]")
            #expect(group["count"] as? Int == 1)
            #expect(group["status"] as? String == "open")
            let groupID = try #require(group["id"] as? String)
            // The group as the crash list shows it.
            let listed = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken).json.groups
            #expect(listed.first?["id"] as? String == groupID)
            #expect(Set(group.keys) == Set(try #require(listed.first).keys))

            let message = try #require(try await receiver.wait(for: "slack").first)
            #expect(verify(message, secret: slack.secret))
            let text = try #require(message.json?["text"] as? String)
            #expect(text.contains("New crash"))
            #expect(text.contains("index &lt;n&gt; beyond bounds"))
            #expect(text.contains("1 report"))
            #expect(text.contains("https://crash.example.com/projects/\(p.project)/crashes/\(groupID)"))

            // Resolved in 2.0: a report from 1.5 is no regression, one from 2.0.1 is.
            let path = "/v1/projects/\(p.project)/crashes/\(groupID)"
            let resolve = try await client.query(
                path, token: p.readToken, method: .patch, body: #"{"status":"resolved","resolvedIn":"2.0"}"#)
            #expect(resolve.status == .ok)
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON(version: "1.5")])).status == .accepted)
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON(version: "2.0.1")])).status == .accepted)
            let regressed = try #require(try await receiver.wait(for: "json", where: { $0.event == "group.regressed" }).first)
            #expect(verify(regressed, secret: json.secret))
            #expect(regressed.delivery != new.delivery)
            let regressedGroup = try #require(regressed.json?["group"] as? [String: Any])
            #expect(regressedGroup["id"] as? String == groupID)
            #expect(regressedGroup["status"] as? String == "regressed")

            // One event each, whatever the retries and the later reports.
            let events = try await withTestDatabase { db in try await db.deliveryEvents(webhook: json.id) }
            #expect(events == ["group.new", "group.regressed"])
            #expect(receiver.received("json").count == 2)
            #expect(receiver.received("slack").count == 1)

            // The list: no secrets, the last delivery's status and time.
            let list = try await client.waitForWebhooks(p) { hooks in
                hooks.allSatisfy { ($0["lastDelivery"] as? [String: Any])?["status"] as? String == "delivered" }
            }
            #expect(list.count == 2)
            #expect(list.allSatisfy { $0["secret"] == nil })
            let last = try #require(list.first { $0["id"] as? String == json.id }?["lastDelivery"] as? [String: Any])
            #expect(last["httpStatus"] as? Int == 200)
            #expect((last["at"] as? String).flatMap { RFC3339.parse($0) } != nil)
        }
        await receiver.stop()
    }

    @Test("a receiver answering 500 gets the same delivery again, until it answers 2xx")
    func retriedWithSameID() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        receiver.setMode(.status(500), for: "down")
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: receiver.url("down"), events: ["group.new"])
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let failed = try await receiver.wait(for: "down", count: 2)
            let id = try #require(failed[0].delivery)
            #expect(failed.allSatisfy { $0.delivery == id && $0.event == "group.new" })
            let retrying = try await client.waitForWebhooks(p) { hooks in
                (hooks.first?["lastDelivery"] as? [String: Any])?["status"] as? String == "retrying"
            }
            let last = try #require(retrying.first?["lastDelivery"] as? [String: Any])
            #expect(last["httpStatus"] as? Int == 500)
            #expect(last["id"] as? String == id)

            receiver.setMode(.ok, for: "down")
            let ok = try await receiver.wait(for: "down", where: { $0.answered == 200 })
            #expect(ok.allSatisfy { $0.delivery == id })
            #expect(ok.allSatisfy { verify($0, secret: hook.secret) })
            _ = try await client.waitForWebhooks(p) { hooks in
                (hooks.first?["lastDelivery"] as? [String: Any])?["status"] as? String == "delivered"
            }
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            #expect(metrics.contains(#"crashguard_webhook_deliveries_total{outcome="retry"}"#))
            #expect(metrics.contains(#"crashguard_webhook_deliveries_total{outcome="delivered"}"#))
        }
        await receiver.stop()
    }

    @Test("a receiver that holds its answer does not hold back the deliveries claimed beside or after it")
    func stuckReceiverDoesNotBlockOthers() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        receiver.setMode(.hold, for: "stuck")
        // A minute's timeout: a sender that waited for its whole batch would hold the second
        // event back for that minute, far past the wait below.
        var configuration = Self.configuration()
        configuration.webhooks.timeout = .seconds(60)
        try await withApp(configuration) { client in
            _ = try await client.createWebhook(p, url: receiver.url("stuck"), events: ["group.new"])
            _ = try await client.createWebhook(p, url: receiver.url("ok"), events: ["group.new"])
            let first = batchBody([reportJSON(kind: "container")])
            #expect(try await client.ingest(key: p.ingestKey, body: first).status == .accepted)
            _ = try await receiver.wait(for: "stuck")
            _ = try await receiver.wait(for: "ok")
            // A second new group while the first delivery to "stuck" is still unanswered.
            let second = batchBody([reportJSON(kind: "timer", reason: "timer fired on a deallocated target")])
            #expect(try await client.ingest(key: p.ingestKey, body: second).status == .accepted)
            let both = try await receiver.wait(for: "ok", count: 2, timeout: .seconds(20))
            #expect(Set(both.compactMap(\.delivery)).count == 2)
            #expect(receiver.received("stuck").first?.answered == nil)  // still held
            receiver.setMode(.ok, for: "stuck")  // so the shutdown does not wait out the timeout
        }
        await receiver.stop()
    }

    @Test("a deleted webhook gets nothing, not even its pending retries")
    func deletedWebhook() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        receiver.setMode(.status(503), for: "gone")
        try await withApp(Self.configuration()) { client in
            let keep = try await client.createWebhook(p, url: receiver.url("keep"), events: ["group.new"])
            let gone = try await client.createWebhook(p, url: receiver.url("gone"), events: ["group.new"])
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON(reason: "first")])).status == .accepted)
            _ = try await receiver.wait(for: "gone")
            _ = try await receiver.wait(for: "keep")
            let path = "/v1/projects/\(p.project)/webhooks/\(gone.id)"
            #expect(try await client.query(path, token: p.readToken, method: .delete).status == .noContent)
            #expect(try await client.query(path, token: p.readToken, method: .delete).status == .notFound)
            let before = receiver.received("gone").count
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON(reason: "second")])).status == .accepted)
            _ = try await receiver.wait(for: "keep", count: 2)
            // Several retry delays (0.2-0.4 s) pass: a pending retry of the deleted hook would be sent.
            try await Task.sleep(for: .seconds(1.5))
            #expect(receiver.received("gone").count == before)
            #expect(try await withTestDatabase { db in try await db.deliveryEvents(webhook: gone.id) }.isEmpty)
            let list = try await client.query("/v1/projects/\(p.project)/webhooks", token: p.readToken).json
            #expect((list["webhooks"] as? [[String: Any]])?.map { $0["id"] as? String } == [keep.id])
        }
        await receiver.stop()
    }

    @Test("webhooks need the project's read token: 401 without, 404 with another project's")
    func authorization() async throws {
        let a = try await makeProject()
        let b = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(a, url: "https://example.com/hook", events: ["group.new"])
            let base = "/v1/projects/\(a.project)/webhooks"
            let body = #"{"url":"https://example.com/x","events":["group.new"]}"#
            for token in [b.readToken] {
                #expect(try await client.query(base, token: token, method: .post, body: body).status == .notFound)
                #expect(try await client.query(base, token: token).status == .notFound)
                #expect(try await client.query("\(base)/\(hook.id)", token: token, method: .delete).status == .notFound)
            }
            for token in [nil, "cgr_unknown", a.ingestKey] as [String?] {
                #expect(try await client.query(base, token: token, method: .post, body: body).status == .unauthorized)
                #expect(try await client.query(base, token: token).status == .unauthorized)
                #expect(try await client.query("\(base)/\(hook.id)", token: token, method: .delete).status == .unauthorized)
            }
            // B's own list is empty, and A's hook survived B's attempts.
            let listB = try await client.query("/v1/projects/\(b.project)/webhooks", token: b.readToken).json
            #expect((listB["webhooks"] as? [Any])?.isEmpty == true)
            let listA = try await client.query(base, token: a.readToken).json
            #expect((listA["webhooks"] as? [[String: Any]])?.count == 1)
        }
    }

    @Test(
        "bad URLs, events and formats get 400 naming the field",
        arguments: [
            (#"{"url":"ftp://example.com/x","events":["group.new"]}"#, "url"),
            (#"{"url":"/relative/path","events":["group.new"]}"#, "url"),
            (#"{"url":"https://","events":["group.new"]}"#, "url"),
            (#"{"url":"not a url","events":["group.new"]}"#, "url"),
            (#"{"url":"https://user:pw@example.com/","events":["group.new"]}"#, "url"),
            (#"{"url":42,"events":["group.new"]}"#, "url"),
            (#"{"events":["group.new"]}"#, "url"),
            (#"{"url":"https://example.com/x","events":["group.deleted"]}"#, "events"),
            (#"{"url":"https://example.com/x","events":"group.new"}"#, "events"),
            (#"{"url":"https://example.com/x","events":[1]}"#, "events"),
            (#"{"url":"https://example.com/x"}"#, "events"),
            (#"{"url":"https://example.com/x","events":["group.new"],"format":"xml"}"#, "format"),
            (#"{"url":"https://example.com/x","events":["group.new"],"format":1}"#, "format"),
            (#"["https://example.com/x"]"#, "body"),
            ("not json", "body"),
        ])
    func validation(body: String, field: String) async throws {
        let p = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let response = try await client.query("/v1/projects/\(p.project)/webhooks", token: p.readToken, method: .post, body: body)
            #expect(response.status == .badRequest)
            #expect(response.json.error.hasPrefix("\(field):"), "\(response.json.error)")
            let list = try await client.query("/v1/projects/\(p.project)/webhooks", token: p.readToken).json
            #expect((list["webhooks"] as? [Any])?.isEmpty == true)
        }
    }

    @Test("a spike in seeded hourly rollups fires once, and is delivered")
    func spike() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        let now = Date()
        let hour = TimeWindow.floor(now, TimeWindow.hour)
        let (spiking, steady, small, groups) = try await withTestDatabase { db in
            let project = try #require(try await PostgresProjectStore(database: db).project(readToken: p.readToken))
            let hook = WebhookRequest(url: receiver.url("spike"), events: [.groupSpike], format: .json)
            _ = try await PostgresWebhookStore(database: db).create(project: project.id, hook, secret: "s3cret")
            // Baseline 1/h and 30 in the current hour: 30 >= 10 and >= 5 x 1.
            let spiking = try await db.seedGroup(project: project.id, title: "spiking", hour: hour, baseline: 1, current: 30)
            // Baseline 10/h: 30 < 5 x 10.
            let steady = try await db.seedGroup(project: project.id, title: "steady", hour: hour, baseline: 10, current: 30)
            // Nothing before, but only 9.
            let small = try await db.seedGroup(project: project.id, title: "small", hour: hour, baseline: 0, current: 9)
            let mine = Set([spiking, steady, small])
            let first = try await PostgresWebhookStore(database: db).detectSpikes(now: now).filter(mine.contains)
            let again = try await PostgresWebhookStore(database: db).detectSpikes(now: now.addingTimeInterval(60)).filter(mine.contains)
            #expect(first == [spiking])
            #expect(again.isEmpty)
            return (spiking, steady, small, mine)
        }
        _ = (steady, small, groups)
        try await withApp(Self.configuration()) { _ in
            let sent = try await receiver.wait(for: "spike")
            #expect(sent.count == 1)
            #expect(sent.first?.event == "group.spike")
            let group = sent.first?.json?["group"] as? [String: Any]
            #expect(group?["id"] as? String == String(spiking))
            #expect(sent.first.map { verify($0, secret: "s3cret") } == true)
        }
        await receiver.stop()
    }

    @Test("a spike spread over a merge target and its member fires once, for the target; a member's baseline holds its target")
    func spikeOfAMergeTarget() async throws {
        let p = try await makeProject()
        let now = Date()
        let hour = TimeWindow.floor(now, TimeWindow.hour)
        try await withTestDatabase { db in
            let project = try #require(try await PostgresProjectStore(database: db).project(readToken: p.readToken))
            let store = PostgresWebhookStore(database: db)
            // No sender runs in this test: the queued events go to a port nothing listens on.
            let hook = WebhookRequest(url: "http://127.0.0.1:9/spike", events: [.groupSpike], format: .json)
            _ = try await store.create(project: project.id, hook, secret: "s3cret")
            // 4 + 20 reports in the current hour: the member alone would spike, the target alone not.
            let target = try await db.seedGroup(project: project.id, title: "target", hour: hour, baseline: 0, current: 4)
            let member = try await db.seedGroup(project: project.id, title: "member", hour: hour, baseline: 0, current: 20)
            // 20 with no baseline of its own, but its member's 5 an hour: 20 < 5 x 5.
            let held = try await db.seedGroup(project: project.id, title: "held", hour: hour, baseline: 0, current: 20)
            let heldMember = try await db.seedGroup(project: project.id, title: "held member", hour: hour, baseline: 5, current: 0)
            let triage = PostgresTriageStore(database: db)
            for (source, into) in [(member, target), (heldMember, held)] {
                #expect(try await triage.merge(project: project.id, source: source, into: into, actor: .system) == .merged(target: into))
            }
            let mine = Set([target, member, held, heldMember])
            #expect(try await store.detectSpikes(now: now).filter(mine.contains) == [target])
            #expect(try await store.detectSpikes(now: now.addingTimeInterval(60)).filter(mine.contains).isEmpty)
            try await db.client.query("DELETE FROM webhooks WHERE project_id = \(project.id)", logger: db.logger)
        }
    }

    @Test("an event committed before a SIGKILL is delivered after the restart, with the same delivery id")
    func deliveredAfterSIGKILL() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        // The receiver takes the first POST and never answers it: the server dies mid-delivery.
        receiver.setMode(.hold, for: "k")
        let environment = [
            "DATABASE_URL": TestEnvironment.databaseURL, "CRASHGUARD_WEBHOOK_TIMEOUT": "2",
            "CRASHGUARD_WEBHOOK_POLL_INTERVAL": "0.1", "CRASHGUARD_WEBHOOK_RETRY_DELAY": "0.3",
            "CRASHGUARD_SPIKE_INTERVAL": "0", "CRASHGUARD_WEBHOOK_ALLOW_HOSTS": "127.0.0.1", "CRASHGUARD_WEBHOOK_CONCURRENCY": "8",
        ]
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let servers = Mutex<[ServerProcess]>([])
        do {
            let first = try await ServerProcess(arguments: ["--rate-limit", "0"], environment: environment)
            servers.withLock { $0.append(first) }
            var request = HTTPClientRequest(url: first.baseURL + "/v1/projects/\(p.project)/webhooks")
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(p.readToken)")
            request.body = .bytes(ByteBuffer(string: #"{"url":"\#(receiver.url("k"))","events":["group.new"]}"#))
            let created = try await client.execute(request, timeout: .seconds(30))
            #expect(created.status.code == 201)
            let posted = await post(client, url: first.baseURL, key: p.ingestKey, body: batchBody([reportJSON()]))
            #expect(posted.status == 202)
            let held = try await receiver.wait(for: "k")
            kill(first.process.processIdentifier, SIGKILL)
            try #require(await first.exitStatus() != nil, "the killed server's exit is seen")
            receiver.setMode(.ok, for: "k")

            let second = try await ServerProcess(arguments: ["--rate-limit", "0"], environment: environment)
            servers.withLock { $0.append(second) }
            // The held request is answered too (to a dead server); the second comes from the new one.
            let answered = try await receiver.wait(for: "k", count: 2, where: { $0.answered == 200 })
            #expect(answered.allSatisfy { $0.delivery == held[0].delivery && $0.event == "group.new" })
            #expect(await second.terminate() == 0)
        } catch {
            for server in servers.withLock({ $0 }) where server.process.isRunning { server.process.terminate() }
            try? await client.shutdown()
            await receiver.stop()
            throw error
        }
        try await client.shutdown()
        await receiver.stop()
    }
}

/// `true` when the request's `X-CrashGuard-Signature` is the HMAC-SHA256 of its body with `secret`.
func verify(_ request: WebhookReceiver.Received, secret: String) -> Bool {
    guard let header = request.headers["x-crashguard-signature"], header.hasPrefix("sha256=") else { return false }
    let hex = Array(header.dropFirst(7).utf8)
    guard hex.count == 64 else { return false }
    var mac: [UInt8] = []
    for i in stride(from: 0, to: 64, by: 2) {
        guard let byte = UInt8(String(decoding: hex[i..<i + 2], as: UTF8.self), radix: 16) else { return false }
        mac.append(byte)
    }
    return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: request.body, using: SymmetricKey(data: Array(secret.utf8)))
}

/// A webhook as `POST` answered it.
struct CreatedHook: Sendable {
    var id: String
    var secret: String
}

extension TestClientProtocol {
    /// Creates a webhook; expects 201 with an id and a secret.
    func createWebhook(
        _ p: ProjectCredentials, url: String, events: [String], format: String = "json"
    ) async throws -> CreatedHook {
        let body = String(
            decoding: try JSONSerialization.data(withJSONObject: ["url": url, "events": events, "format": format]), as: UTF8.self)
        let response = try await query("/v1/projects/\(p.project)/webhooks", token: p.readToken, method: .post, body: body)
        #expect(response.status == .created)
        #expect(response.json["url"] as? String == url)
        #expect(response.json["events"] as? [String] == events)
        return CreatedHook(id: try #require(response.json["id"] as? String), secret: try #require(response.json["secret"] as? String))
    }

    /// Lists the project's webhooks until `done` holds for them (or 15 s passed).
    func waitForWebhooks(
        _ p: ProjectCredentials, _ done: ([[String: Any]]) -> Bool
    ) async throws -> [[String: Any]] {
        let deadline = ContinuousClock.now + .seconds(15)
        while true {
            let hooks = try await query("/v1/projects/\(p.project)/webhooks", token: p.readToken).json["webhooks"] as? [[String: Any]] ?? []
            if done(hooks) || ContinuousClock.now >= deadline {
                #expect(done(hooks), "webhooks: \(hooks)")
                return hooks
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

extension CrashDatabase {
    /// The events queued for a webhook, sorted.
    func deliveryEvents(webhook: String) async throws -> [String] {
        let rows = try await client.query(
            "SELECT event FROM webhook_deliveries WHERE webhook_id = \(Int64(webhook) ?? 0) ORDER BY event", logger: logger)
        var out: [String] = []
        for try await event in rows.decode(String.self) { out.append(event) }
        return out
    }

    /// A group with hourly rollups: `baseline` reports in each of the 24 hours before the
    /// previous one, and `current` in the hour starting at `hour`.
    func seedGroup(project: Int64, title: String, hour: Date, baseline: Int64, current: Int64) async throws -> Int64 {
        let rows = try await client.query(
            """
            INSERT INTO crash_groups (project_id, signature, grouping_version, kind, title, normalized_reason,
                                      report_count, first_seen, last_seen)
            VALUES (\(project), \(UUID().uuidString), 'v1', 'custom', \(title), \(title),
                    \(baseline * 24 + current), \(hour) - interval '25 hours', \(hour))
            RETURNING id
            """, logger: logger)
        var id: Int64 = 0
        for try await value in rows.decode(Int64.self) { id = value }
        var buckets: [(Date, Int64)] = [(hour, current)]
        if baseline > 0 { buckets += (2...25).map { (hour.addingTimeInterval(-Double($0) * 3600), baseline) } }
        for (bucket, count) in buckets {
            try await client.query(
                """
                INSERT INTO group_hourly (project_id, group_id, hour, app_id, app_version, os, count)
                VALUES (\(project), \(id), \(bucket), 'com.example.demo', '1.0.0', 'iOS', \(count))
                """, logger: logger)
            try await client.query(
                """
                INSERT INTO group_version_hourly (group_id, app_version, hour, count, sketch)
                VALUES (\(id), '', \(bucket), \(count), ''::bytea), (\(id), '1.0.0', \(bucket), \(count), ''::bytea)
                """, logger: logger)
        }
        return id
    }
}
