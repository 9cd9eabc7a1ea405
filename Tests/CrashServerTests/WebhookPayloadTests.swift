import Foundation
import Testing

@testable import CrashServer

/// The webhook bodies (alerts.md): a group's event and a release's, each as `json` and `slack`.
@Suite("Webhook payload")
struct WebhookPayloadTests {
    static let deliveredAt = Date(timeIntervalSince1970: 1_795_003_700)

    static func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test("a group's body names the group and the rule, never a release; slack is one text")
    func groupBody() throws {
        let group = GroupBody(
            id: "42", signature: "s", kind: "container", groupingVersion: "v2", title: "index <n> & more", count: 3, devices: 2,
            firstSeen: Date(timeIntervalSince1970: 1_795_000_000), lastSeen: Date(timeIntervalSince1970: 1_795_003_600),
            status: .open, resolvedIn: nil, fatal: true, versions: ["2.0.0"])
        let rule = AlertRuleRef(id: "7", name: "ops")
        let json = try Self.object(
            WebhookPayload.render(
                format: .json, event: "group.new", project: "demo", group: group, publicURL: "https://crash.example.com/",
                deliveredAt: Self.deliveredAt, rule: rule))
        #expect(Set(json.keys) == ["event", "project", "group", "deliveredAt", "rule"])
        #expect(json["event"] as? String == "group.new" && json["project"] as? String == "demo")
        #expect((json["group"] as? [String: Any])?["id"] as? String == "42")
        #expect(json["rule"] as? [String: String] == ["id": "7", "name": "ops"])
        #expect(json["deliveredAt"] as? String == "2026-11-18T12:08:20Z")
        let subscription = try Self.object(
            WebhookPayload.render(
                format: .json, event: "group.new", project: "demo", group: group, publicURL: "https://crash.example.com",
                deliveredAt: Self.deliveredAt))
        #expect(subscription["rule"] == nil)
        let slack = try WebhookPayload.render(
            format: .slack, event: "group.new", project: "demo", group: group, publicURL: "https://crash.example.com/",
            deliveredAt: Self.deliveredAt, rule: rule)
        #expect(
            try Self.object(slack) as? [String: String] == [
                "text": "New crash in demo: `index &lt;n&gt; &amp; more` (container, fatal), 3 reports in 7 days, "
                    + "https://crash.example.com/projects/demo/crashes/42"
            ])
        #expect(String(decoding: slack, as: UTF8.self).contains("https://crash.example.com/projects"))  // no escaped slashes
    }

    @Test("a release's body names the release and the rule, never a group; slack names the threshold")
    func releaseBody() throws {
        let release = WebhookPayload.ReleaseBody(
            version: "2.4.0", crashFreeSessions: 0.95, sessions: 200, crashedSessions: 10, windowMinutes: 1440,
            url: "https://crash.example.com/projects/demo/releases/2.4.0")
        let rule = AlertRuleRef(id: "9", name: "health")
        let json = try Self.object(
            WebhookPayload.renderRelease(
                format: .json, event: "release.crashFreeSessions", project: "demo", release: release, below: 0.99,
                deliveredAt: Self.deliveredAt, rule: rule))
        #expect(Set(json.keys) == ["event", "project", "release", "deliveredAt", "rule"])
        let body = try #require(json["release"] as? [String: Any])
        #expect(body["version"] as? String == "2.4.0" && body["sessions"] as? Int == 200 && body["crashedSessions"] as? Int == 10)
        #expect(body["crashFreeSessions"] as? Double == 0.95 && body["windowMinutes"] as? Int == 1440)
        let slack = try WebhookPayload.renderRelease(
            format: .slack, event: "release.crashFreeSessions", project: "demo", release: release, below: 0.99,
            deliveredAt: Self.deliveredAt, rule: rule)
        #expect(
            try Self.object(slack) as? [String: String] == [
                "text": "Crash-free sessions below 99.00 % in demo: version 2.4.0 at 95.00 %, 10 of 200 sessions crashed in 1440 minutes, "
                    + "https://crash.example.com/projects/demo/releases/2.4.0"
            ])
    }
}
