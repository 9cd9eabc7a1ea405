import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Alert rules and email", the triggers no report fires: `spike` (with spike
/// detection), `crashFreeSessions` (the periodic check) and `group.reappeared` when a snooze's
/// time runs out, against real PostgreSQL. Every check takes its time as a parameter: the
/// throttle is crossed by asking at a later time, never by waiting.
@Suite("Alert rules firing periodically")
struct AlertRulePeriodicTests {
    typealias Fixture = AlertRuleFiringTests.Fixture

    /// The (rule, event, release) of every queued rule delivery of the fixture's webhook.
    static func releaseFirings(_ f: Fixture) async throws -> [String] {
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT rule_id, event, release, group_id FROM webhook_deliveries WHERE webhook_id = \(Int64(f.hook) ?? 0)
                ORDER BY created_at, release
                """, logger: db.logger)
            var out: [String] = []
            for try await (rule, event, release, group) in rows.decode((Int64?, String, String?, Int64?).self) {
                out.append("\(rule ?? 0) \(event) \(release ?? "-") \(group.map(String.init) ?? "-")")
            }
            return out
        }
    }

    @Test("spike rules fire on a spiking group of their kind, without any group.spike subscription, once per throttle")
    func spike() async throws {
        try await AlertRuleFiringTests().withFixture { client, f in
            let custom = try await f.rule(client, #""when": {"type": "spike"}, "filters": {"kind": "custom"}, "throttleMinutes": 5"#)
            let signal = try await f.rule(client, #""when": {"type": "spike"}, "filters": {"kind": "signal"}"#)
            let off = try await f.rule(client, #""when": {"type": "spike"}, "enabled": false"#)
            let refused = try await client.query(
                "/v1/projects/\(f.p.project)/alert-rules", token: f.p.readToken, method: .post,
                body:
                    #"{"name": "r", "when": {"type": "spike"}, "filters": {"os": "iOS"}, "actions": [{"type": "webhook", "webhook": "\#(f.hook)"}]}"#)
            #expect(refused.status == .badRequest && refused.json.error.hasPrefix("filters.os:"), "\(refused.json)")
            let now = Date()
            let hour = TimeWindow.floor(now, TimeWindow.hour)
            let (spiking, steady) = try await withTestDatabase { db in
                let project = try #require(try await PostgresProjectStore(database: db).project(readToken: f.p.readToken))
                let spiking = try await db.seedGroup(project: project.id, title: "spiking", hour: hour, baseline: 1, current: 30)
                let steady = try await db.seedGroup(project: project.id, title: "steady", hour: hour, baseline: 10, current: 30)
                let store = PostgresWebhookStore(database: db)
                // No webhook of the project subscribes to group.spike: nothing is queued as an event.
                let queued = try await store.detectSpikes(now: now)
                #expect(!queued.contains(spiking) && !queued.contains(steady))
                try await store.detectSpikes(now: now.addingTimeInterval(60))  // inside the throttle
                return (spiking, steady)
            }
            let fired = try await f.fired()
            #expect(fired == [AlertRuleFiringTests.Firing(rule: custom, name: "r", event: "group.spike", title: "spiking")])
            #expect(!fired.contains { [signal, off].contains($0.rule) })
            let stored = try await client.query("/v1/projects/\(f.p.project)/alert-rules/\(custom)", token: f.p.readToken)
            #expect((stored.json["lastFired"] as? [String: Any])?["group"] as? String == String(spiking))
            // Past the rule's 5 minutes the group, still spiking, fires again.
            _ = try await withTestDatabase { db in
                try await PostgresWebhookStore(database: db).detectSpikes(now: now.addingTimeInterval(6 * 60))
            }
            #expect(try await f.fired().filter { $0.rule == custom }.count == 2)
            _ = steady
        }
    }

    /// A project with sessions started 10 minutes before `now` (the real time, which the door
    /// checks): `crashed` crashed and `ok` healthy per version and environment.
    static func sendSessions(
        _ client: some TestClientProtocol, _ f: Fixture, now: Date,
        _ counts: [(version: String, environment: String, crashed: Int, ok: Int)]
    ) async throws {
        var sessions: [Any] = []
        for entry in counts {
            for i in 0..<(entry.crashed + entry.ok) {
                sessions.append(
                    ReleaseHealthTests.session(
                        UUID().uuidString.lowercased(), status: i < entry.crashed ? "crashed" : "exited", did: "u\(i)",
                        release: "com.acme.shop@\(entry.version)", environment: entry.environment,
                        started: now.addingTimeInterval(-600)))
            }
        }
        let response = try await client.postSessions(key: f.p.ingestKey, ReleaseHealthTests.body(sessions))
        #expect(response.status.code < 300, "\(response.json)")
    }

    @Test(
        "crashFreeSessions fires per version below the rate with the minimum sessions, in its environment, once per throttle; two checks at once fire once"
    )
    func crashFreeSessions() async throws {
        try await AlertRuleFiringTests().withFixture { client, f in
            let now = Date()
            try await Self.sendSessions(
                client, f, now: now,
                [
                    ("2.4.0", "production", 2, 8),  // 0.8 < 0.9 with 10 sessions: fires
                    ("2.5.0", "production", 9, 0),  // 9 sessions: below the minimum
                    ("2.6.0", "staging", 10, 0),  // another environment
                    ("2.7.0", "production", 0, 10),  // healthy
                ])
            let rule = try await f.rule(
                client,
                #""when": {"type": "crashFreeSessions", "below": 0.9, "minSessions": 10, "windowMinutes": 60}, "filters": {"environment": "production"}"#
            )
            let named = try await f.rule(
                client, #""when": {"type": "crashFreeSessions", "below": 0.99, "release": "2.7.0", "minSessions": 1}"#)
            try await withTestDatabase { db in
                // Two servers checking at the same moment fire once.
                async let a = AlertRuleFiring.checkCrashFreeSessions(at: now, database: db, logger: db.logger)
                async let b = AlertRuleFiring.checkCrashFreeSessions(at: now, database: db, logger: db.logger)
                _ = try await (a, b)
                try await AlertRuleFiring.checkCrashFreeSessions(at: now.addingTimeInterval(60), database: db, logger: db.logger)
            }
            #expect(try await Self.releaseFirings(f) == ["\(rule) release.crashFreeSessions 2.4.0 -"])
            let stored = try await client.query("/v1/projects/\(f.p.project)/alert-rules/\(rule)", token: f.p.readToken)
            let last = try #require(stored.json["lastFired"] as? [String: Any])
            #expect(last["release"] as? String == "2.4.0")
            #expect(last["group"] is NSNull)
            // Past the throttle (30 minutes), still below: fires again; the window (60 minutes)
            // still holds the sessions.
            _ = try await withTestDatabase { db in
                try await AlertRuleFiring.checkCrashFreeSessions(at: now.addingTimeInterval(31 * 60), database: db, logger: db.logger)
            }
            #expect(try await Self.releaseFirings(f).count == 2)
            // Once the window has passed the sessions, nothing is below.
            _ = try await withTestDatabase { db in
                try await AlertRuleFiring.checkCrashFreeSessions(at: now.addingTimeInterval(2 * 3600), database: db, logger: db.logger)
            }
            #expect(try await Self.releaseFirings(f).count == 2)
            _ = named
        }
    }

    @Test("a release firing's webhook body names the version, its rate and counts, and the rule")
    func releaseBody() async throws {
        try await AlertRuleFiringTests().withFixture { client, f in
            let now = Date()
            try await Self.sendSessions(client, f, now: now, [("3.0.0", "production", 1, 3)])
            let rule = try await f.rule(client, #""when": {"type": "crashFreeSessions", "below": 0.9, "minSessions": 4}"#)
            let body = try await withTestDatabase { db in
                let project = try #require(try await PostgresProjectStore(database: db).project(readToken: f.p.readToken))
                let sender = WebhookSender(
                    store: PostgresWebhookStore(database: db), queries: PostgresQueryStore(database: db), schemaApplied: db.schemaApplied,
                    settings: WebhookSettings(), publicURL: "https://crash.example.com/", metrics: ServerMetrics(), logger: db.logger)
                let delivery = ClaimedDelivery(
                    id: UUID(), event: "release.crashFreeSessions", groupID: nil, attempts: 0, createdAt: now, url: "https://example.com",
                    format: "json", secret: "s", projectID: project.id, projectSlug: f.p.project,
                    rule: AlertRuleRef(id: rule, name: "r"), release: "3.0.0",
                    ruleSpec: try await PostgresAlertRuleStore(database: db).rule(project: project.id, id: Int64(rule)!).map {
                        try PostgresAlertRuleStore.spec($0.rule)
                    })
                return try #require(try await sender.render(delivery))
            }
            let json = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
            #expect(json["event"] as? String == "release.crashFreeSessions")
            #expect(json["rule"] as? [String: String] == ["id": rule, "name": "r"])
            let release = try #require(json["release"] as? [String: Any])
            #expect(release["version"] as? String == "3.0.0")
            #expect(release["sessions"] as? Int == 4)
            #expect(release["crashedSessions"] as? Int == 1)
            #expect(release["crashFreeSessions"] as? Double == 0.75)
            #expect(release["url"] as? String == "https://crash.example.com/projects/\(f.p.project)/releases/3.0.0")
        }
    }

    @Test("group.reappeared rules fire when a snooze's time runs out, matched against the group's latest report")
    func reappearedOnTime() async throws {
        try await AlertRuleFiringTests().withFixture { client, f in
            let any = try await f.rule(client, #""when": {"type": "group.reappeared"}"#)
            let signals = try await f.rule(client, #""when": {"type": "group.reappeared"}, "filters": {"kind": "signal"}"#)
            try await f.send(client, [AlertRuleFiringTests.report("sleepy")])
            let groups = try await client.query("/v1/projects/\(f.p.project)/crashes", token: f.p.readToken).json.groups
            let sleepy = try #require(groups.titled("sleepy")?["id"] as? String)
            let until = RFC3339.format(Date().addingTimeInterval(3600))
            let snoozed = try await client.query(
                "/v1/projects/\(f.p.project)/crashes/\(sleepy)", token: f.p.readToken, method: .patch,
                body: #"{"status": "ignored", "until": "\#(until)"}"#)
            #expect(snoozed.status == .ok, "\(snoozed.json)")
            let woken = try await withTestDatabase { db in
                // The snooze's time comes: moved back rather than waited for.
                try await db.client.query(
                    "UPDATE crash_groups SET snooze_until = now() - interval '1 second' WHERE id = \(Int64(sleepy)!)", logger: db.logger)
                return try await PostgresTriageStore(database: db).wakeDueSnoozes(limit: 500)
            }
            #expect(woken.contains(Int64(sleepy)!))
            let fired = try await f.fired()
            #expect(fired == [AlertRuleFiringTests.Firing(rule: any, name: "r", event: "group.reappeared", title: "sleepy")])
            #expect(!fired.contains { $0.rule == signals })
        }
    }
}
