import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Alert rules and email", triggers at ingest: each trigger, filter and the
/// throttle against real PostgreSQL, read from the outbox rows the ingest transaction queued.
@Suite("Alert rules firing")
struct AlertRuleFiringTests {
    /// One project with a webhook subscribed to nothing (so every row is a rule's), no sender.
    struct Fixture {
        var p: ProjectCredentials
        var hook: String

        /// Creates a rule sending to the webhook; returns its id.
        func rule(_ client: some TestClientProtocol, _ fields: String) async throws -> String {
            let body = #"{"name": "r", "actions": [{"type": "webhook", "webhook": "\#(hook)"}], \#(fields)}"#
            let created = try await client.query("/v1/projects/\(p.project)/alert-rules", token: p.readToken, method: .post, body: body)
            #expect(created.status == .created, "\(created.json)")
            return try #require(created.json["id"] as? String)
        }

        /// The (rule, event, group title) of every queued rule delivery of the webhook, in order.
        func fired() async throws -> [Firing] {
            try await withTestDatabase { db in
                let rows = try await db.client.query(
                    """
                    SELECT d.rule_id, d.rule_name, d.event, g.title FROM webhook_deliveries d JOIN crash_groups g ON g.id = d.group_id
                    WHERE d.webhook_id = \(Int64(hook) ?? 0) ORDER BY d.created_at, d.event, g.title
                    """, logger: db.logger)
                var out: [Firing] = []
                for try await (rule, name, event, title) in rows.decode((Int64?, String?, String, String).self) {
                    out.append(Firing(rule: rule.map(String.init) ?? "", name: name ?? "", event: event, title: title))
                }
                return out
            }
        }

        func send(_ client: some TestClientProtocol, _ reports: [TestReport]) async throws {
            try await client.send(reports, key: p.ingestKey)
        }
    }

    struct Firing: Equatable, CustomStringConvertible {
        var rule: String, name: String, event: String, title: String
        var description: String { "\(rule) \(event) \(title)" }
    }

    static func configuration() -> ServerConfiguration {
        TestEnvironment.configuration { c in c.webhooks.concurrency = 0 }
    }

    func withFixture(_ body: @escaping @Sendable (any TestClientProtocol, Fixture) async throws -> Void) async throws {
        let p = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: "https://example.com/hook", events: [])
            try await body(client, Fixture(p: p, hook: hook.id))
        }
    }

    static func report(
        _ reason: String, kind: String = "custom", version: String = "1.0.0", os: String? = "iOS",
        device: String? = "device-1", fatal: Bool? = nil, context: [String: String]? = nil,
        environment: String? = nil, at: Date = Date().addingTimeInterval(-10)
    ) -> TestReport {
        var object = queryReport(reason, at: at, kind: kind, version: version, os: os, device: device, fatal: fatal, context: context).object
        if let environment { object["environment"] = environment }
        return TestReport(object: object)
    }

    @Test("group.new fires once per new group that matches the filters; a duplicate and later reports fire nothing")
    func groupNew() async throws {
        try await withFixture { client, f in
            let rule = try await f.rule(client, #""when": {"type": "group.new"}, "filters": {"kind": "signal", "fatal": true}"#)
            let first = Self.report("a signal", kind: "signal", fatal: true)
            try await f.send(client, [first, Self.report("not fatal", kind: "signal"), Self.report("other kind", fatal: true)])
            try await f.send(client, [first])  // a retried duplicate
            try await f.send(client, [Self.report("a signal", kind: "signal", fatal: true)])  // no longer new
            #expect(try await f.fired() == [Firing(rule: rule, name: "r", event: "group.new", title: "a signal")])
            let stored = try await client.query("/v1/projects/\(f.p.project)/alert-rules/\(rule)", token: f.p.readToken)
            let last = try #require(stored.json["lastFired"] as? [String: Any])
            #expect((last["at"] as? String).flatMap { RFC3339.parse($0) } != nil)
            let groups = try await client.query("/v1/projects/\(f.p.project)/crashes", token: f.p.readToken).json.groups
            #expect(last["group"] as? String == groups.titled("a signal")?["id"] as? String)
        }
    }

    @Test(
        "frequency counts only matching reports in the window; a batch with the first three fires once; the throttle holds, then lets the next fire")
    func frequencyAndThrottle() async throws {
        try await withFixture { client, f in
            let rule = try await f.rule(
                client, #""when": {"type": "frequency", "count": 3, "windowMinutes": 60}, "filters": {"version": ["2.0.0", "2.0.1"]}"#)
            let new = try await f.rule(client, #""when": {"type": "group.new"}"#)
            // Old and other-version reports count for nothing.
            let old = Date().addingTimeInterval(-2 * 3600)
            try await f.send(
                client,
                [Self.report("busy", version: "2.0.0", at: old), Self.report("busy", version: "1.0.0"), Self.report("busy", version: "1.0.0")])
            try await f.send(client, [Self.report("busy", version: "2.0.0"), Self.report("busy", version: "2.0.1")])
            #expect(try await f.fired().map(\.rule) == [new])
            // The third matching report in the hour fires; the next ones are inside the throttle.
            try await f.send(client, [Self.report("busy", version: "2.0.1")])
            try await f.send(client, [Self.report("busy", version: "2.0.1")])
            #expect(try await f.fired().map(\.rule) == [new, rule])
            #expect(try await f.fired().last?.event == "group.frequency")
            // A batch holding a new group's first three reports fires once, and group.new once.
            try await f.send(client, (0..<3).map { _ in Self.report("burst", version: "2.0.0") })
            #expect(try await f.fired().filter { $0.title == "burst" }.map(\.rule).sorted() == [new, rule].sorted())
            // Past the throttle (30 minutes by default), the next qualifying report fires again.
            try await withTestDatabase { db in
                try await db.client.query(
                    "UPDATE alert_firings SET fired_at = fired_at - interval '31 minutes' WHERE rule_id = \(Int64(rule)!)", logger: db.logger)
            }
            try await f.send(client, [Self.report("busy", version: "1.0.0")])  // does not match: nothing
            #expect(try await f.fired().filter { $0.rule == rule }.count == 2)
            try await f.send(client, [Self.report("busy", version: "2.0.0")])
            #expect(try await f.fired().filter { $0.rule == rule && $0.title == "busy" }.count == 2)
        }
    }

    @Test("devices counts distinct device ids; reports without one count for none")
    func devices() async throws {
        try await withFixture { client, f in
            let rule = try await f.rule(client, #""when": {"type": "devices", "count": 2, "windowMinutes": 30}"#)
            try await f.send(client, [Self.report("dev", device: "a"), Self.report("dev", device: "a"), Self.report("dev", device: nil)])
            #expect(try await f.fired() == [])
            try await f.send(client, [Self.report("dev", device: "b")])
            #expect(try await f.fired() == [Firing(rule: rule, name: "r", event: "group.devices", title: "dev")])
        }
    }

    @Test("environment, os and context filters: absent environment is production")
    func filters() async throws {
        try await withFixture { client, f in
            let prod = try await f.rule(client, #""when": {"type": "group.new"}, "filters": {"environment": "production", "os": ["iOS", "iPadOS"]}"#)
            let staging = try await f.rule(
                client, #""when": {"type": "group.new"}, "filters": {"environment": ["staging"], "context": {"screen": "checkout"}}"#)
            try await f.send(
                client,
                [
                    Self.report("plain"), Self.report("android", os: "Android"), Self.report("staged", environment: "staging"),
                    Self.report("checkout", context: ["screen": "checkout", "user": "x"], environment: "staging"),
                    Self.report("cart", context: ["screen": "cart"], environment: "staging"),
                ])
            let fired = try await f.fired()
            #expect(fired.filter { $0.rule == prod }.map(\.title) == ["plain"])
            #expect(fired.filter { $0.rule == staging }.map(\.title) == ["checkout"])
        }
    }

    @Test("regressed fires on the regression; ignored groups fire nothing but reappeared; a disabled rule fires nothing")
    func regressedIgnoredReappearedDisabled() async throws {
        try await withFixture { client, f in
            let regressed = try await f.rule(client, #""when": {"type": "group.regressed"}"#)
            let frequent = try await f.rule(client, #""when": {"type": "frequency", "count": 1, "windowMinutes": 60}, "throttleMinutes": 5"#)
            let reappeared = try await f.rule(client, #""when": {"type": "group.reappeared"}"#)
            let disabled = try await f.rule(client, #""when": {"type": "group.new"}, "enabled": false"#)
            try await f.send(client, [Self.report("fix me", version: "1.0.0"), Self.report("quiet")])
            let groups = try await client.query("/v1/projects/\(f.p.project)/crashes", token: f.p.readToken).json.groups
            let fix = try #require(groups.titled("fix me")?["id"] as? String)
            let quiet = try #require(groups.titled("quiet")?["id"] as? String)
            let crashes = "/v1/projects/\(f.p.project)/crashes"
            #expect(
                try await client.query(
                    "\(crashes)/\(fix)", token: f.p.readToken, method: .patch, body: #"{"status": "resolved", "resolvedIn": "2.0"}"#
                ).status == .ok)
            #expect(
                try await client.query("\(crashes)/\(quiet)", token: f.p.readToken, method: .patch, body: #"{"status": "ignored", "untilCount": 2}"#)
                    .status == .ok)
            // Resolved and not regressed (1.5 < 2.0), and ignored: nothing fires, although the
            // frequency rule's throttle has passed.
            try await withTestDatabase { db in
                try await db.client.query(
                    "UPDATE alert_firings SET fired_at = fired_at - interval '6 minutes' WHERE rule_id = \(Int64(frequent)!)", logger: db.logger)
            }
            try await f.send(client, [Self.report("fix me", version: "1.5"), Self.report("quiet")])
            #expect(try await f.fired().filter { $0.rule != frequent }.isEmpty)
            #expect(try await f.fired().filter { $0.rule == frequent }.map(\.title).sorted() == ["fix me", "quiet"])
            // The regression, and the second report that wakes the snoozed group.
            try await f.send(client, [Self.report("fix me", version: "2.1"), Self.report("quiet")])
            let fired = try await f.fired()
            #expect(fired.filter { $0.rule == regressed }.map(\.title) == ["fix me"])
            #expect(fired.filter { $0.rule == reappeared }.map(\.title) == ["quiet"])
            #expect(fired.filter { $0.rule == disabled }.isEmpty)
        }
    }

    @Test("a rule's webhook delivery names the event and the rule, signed as any delivery; the subscription's events do not matter")
    func webhookBodyNamesTheRule() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        let config = TestEnvironment.configuration { c in
            c.webhooks.allowHosts = ["127.0.0.1"]
            // TestEnvironment turns the sender off (concurrency 0); this test needs it on.
            c.webhooks.concurrency = 2
            c.webhooks.pollInterval = .seconds(0.05)
        }
        try await withApp(config) { client in
            let hook = try await client.createWebhook(p, url: receiver.url("rules"), events: [])
            let f = Fixture(p: p, hook: hook.id)
            let rule = try await f.rule(client, #""when": {"type": "frequency", "count": 2, "windowMinutes": 10}"#)
            try await f.send(client, [Self.report("twice"), Self.report("twice")])
            // Servers of tests running beside this one share the outbox and refuse 127.0.0.1: an
            // attempt they take is retried after their backoff, hence the longer wait.
            let received = try #require(try await receiver.wait(for: "rules", timeout: .seconds(90)).first)
            #expect(received.event == "group.frequency")
            #expect(UUID(uuidString: received.delivery ?? "") != nil)
            let body = try #require(received.json)
            #expect(body["event"] as? String == "group.frequency")
            #expect(body["rule"] as? [String: String] == ["id": rule, "name": "r"])
            #expect((body["group"] as? [String: Any])?["title"] as? String == "twice")
            #expect(verify(received, secret: hook.secret))
        }
        await receiver.stop()
    }

    @Test("a report of a merged group counts towards its target: frequency and regressed fire for the target, group.new never")
    func mergedGroupsFireForTheirTarget() async throws {
        try await withFixture { client, f in
            let new = try await f.rule(client, #""when": {"type": "group.new"}"#)
            let frequency = try await f.rule(client, #""when": {"type": "frequency", "count": 3, "windowMinutes": 60}"#)
            let regressed = try await f.rule(client, #""when": {"type": "group.regressed"}"#)
            try await f.send(client, [Self.report("alert target"), Self.report("alert member")])
            let crashes = "/v1/projects/\(f.p.project)/crashes"
            let groups = try await client.query(crashes, token: f.p.readToken).json.groups
            let target = try #require(groups.titled("alert target")?["id"] as? String)
            let member = try #require(groups.titled("alert member")?["id"] as? String)
            let merged = try await client.query(
                "\(crashes)/\(member)/merge", token: f.p.readToken, method: .post, body: #"{"into": "\#(target)"}"#)
            #expect(merged.status == .ok)
            // The member's second report is the target's third: the target reaches the count.
            try await f.send(client, [Self.report("alert member")])
            #expect(
                try await f.fired().filter { $0.rule != new } == [
                    Firing(rule: frequency, name: "r", event: "group.frequency", title: "alert target")
                ])
            // The member's next report regresses the resolved target, and the rule says so there.
            #expect(
                try await client.query("\(crashes)/\(target)", token: f.p.readToken, method: .patch, body: #"{"status": "resolved"}"#)
                    .status == .ok)
            try await f.send(client, [Self.report("alert member")])
            let fired = try await f.fired()
            #expect(fired.filter { $0.rule == regressed } == [Firing(rule: regressed, name: "r", event: "group.regressed", title: "alert target")])
            #expect(fired.filter { $0.rule == frequency }.count == 1)  // inside the target's throttle
            #expect(fired.filter { $0.rule == new }.map(\.title).sorted() == ["alert member", "alert target"])
        }
    }
}
