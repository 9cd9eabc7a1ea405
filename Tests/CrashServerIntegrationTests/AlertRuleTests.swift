import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Alert rules and email": the rule routes, against real PostgreSQL.
@Suite("Alert rules")
struct AlertRuleTests {
    static func configuration() -> ServerConfiguration {
        TestEnvironment.configuration { c in
            c.webhooks.allowHosts = ["127.0.0.1"]
            c.webhooks.concurrency = 0
        }
    }

    @Test("a rule is created with defaults, listed, read, patched as a whole and deleted")
    func lifecycle() async throws {
        let p = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: "https://example.com/hook", events: [])
            let base = "/v1/projects/\(p.project)/alert-rules"
            let created = try await client.query(
                base, token: p.readToken, method: .post,
                body:
                    #"{"name": "prod 50/h", "when": {"type": "frequency", "count": 50, "windowMinutes": 60}, "filters": {"environment": "production", "kind": ["container", "signal"]}, "actions": [{"type": "webhook", "webhook": "\#(hook.id)"}]}"#
            )
            #expect(created.status == .created)
            let id = try #require(created.json["id"] as? String)
            #expect(created.json["name"] as? String == "prod 50/h")
            #expect(created.json["throttleMinutes"] as? Int == 30)
            #expect(created.json["enabled"] as? Bool == true)
            #expect(created.json["lastFired"] is NSNull)
            #expect((created.json["when"] as? [String: Any])?["count"] as? Int == 50)
            #expect((created.json["filters"] as? [String: Any])?["environment"] as? String == "production")
            #expect((created.json["filters"] as? [String: Any])?["kind"] as? [String] == ["container", "signal"])
            #expect(((created.json["actions"] as? [[String: Any]])?.first)?["webhook"] as? String == hook.id)
            #expect((created.json["createdAt"] as? String).flatMap { RFC3339.parse($0) } != nil)

            let second = try await client.query(
                base, token: p.readToken, method: .post,
                body:
                    #"{"name": "new", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": \#(hook.id)}], "throttleMinutes": 60, "enabled": false}"#
            )
            #expect(second.status == .created)
            let list = try await client.query(base, token: p.readToken)
            #expect((list.json["rules"] as? [[String: Any]])?.map { $0["name"] as? String } == ["prod 50/h", "new"])

            let one = try await client.query("\(base)/\(id)", token: p.readToken)
            #expect(one.status == .ok && one.json["name"] as? String == "prod 50/h")

            // A PATCH keeps what it does not send, and is checked as the whole rule.
            let patched = try await client.query(
                "\(base)/\(id)", token: p.readToken, method: .patch, body: #"{"enabled": false, "throttleMinutes": 5}"#)
            #expect(patched.status == .ok)
            #expect(patched.json["enabled"] as? Bool == false && patched.json["throttleMinutes"] as? Int == 5)
            #expect((patched.json["when"] as? [String: Any])?["type"] as? String == "frequency")
            // A spike rule cannot keep the environment filter: refused, nothing changed.
            let refused = try await client.query("\(base)/\(id)", token: p.readToken, method: .patch, body: #"{"when": {"type": "spike"}}"#)
            #expect(refused.status == .badRequest)
            #expect(refused.json.error.hasPrefix("filters.environment:"), "\(refused.json.error)")
            #expect(try await client.query("\(base)/\(id)", token: p.readToken).json["throttleMinutes"] as? Int == 5)

            // The webhook is in use: 409 naming the rules, until they let it go.
            let busy = try await client.query("/v1/projects/\(p.project)/webhooks/\(hook.id)", token: p.readToken, method: .delete)
            #expect(busy.status == .conflict)
            #expect(busy.json.error.contains("prod 50/h") && busy.json.error.contains("new"), "\(busy.status) \(busy.json)")

            #expect(try await client.query("\(base)/\(id)", token: p.readToken, method: .delete).status == .noContent)
            #expect(try await client.query("\(base)/\(id)", token: p.readToken).status == .notFound)
            let secondID = try #require(second.json["id"] as? String)
            #expect(try await client.query("\(base)/\(secondID)", token: p.readToken, method: .delete).status == .noContent)
            #expect(
                try await client.query("/v1/projects/\(p.project)/webhooks/\(hook.id)", token: p.readToken, method: .delete).status
                    == .noContent)
        }
    }

    @Test("tokens: 401 without one, 404 for another project's token or rule")
    func authentication() async throws {
        let p = try await makeProject()
        let other = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let base = "/v1/projects/\(p.project)/alert-rules"
            #expect(try await client.query(base, token: nil).status == .unauthorized)
            #expect(try await client.query(base, token: p.ingestKey).status == .unauthorized)
            #expect(try await client.query(base, token: other.readToken).status == .notFound)
            let hook = try await client.createWebhook(p, url: "https://example.com/hook", events: ["group.new"])
            let created = try await client.query(
                base, token: p.readToken, method: .post,
                body: #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "\#(hook.id)"}]}"#)
            let id = try #require(created.json["id"] as? String)
            #expect(try await client.query("/v1/projects/\(other.project)/alert-rules/\(id)", token: other.readToken).status == .notFound)
            // Another project's webhook is no webhook of this project.
            let foreign = try await client.query(
                "/v1/projects/\(other.project)/alert-rules", token: other.readToken, method: .post,
                body: #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "\#(hook.id)"}]}"#)
            #expect(foreign.status == .badRequest && foreign.json.error.hasPrefix("actions[0].webhook:"))
        }
    }

    @Test(
        "bad fields get 400 naming the field's path, and store nothing",
        arguments: [
            (#"[1]"#, "body"),
            (#"{"when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#, "name"),
            (#"{"name": "", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#, "name"),
            (#"{"name": "n", "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#, "when"),
            (#"{"name": "n", "when": {"type": "group.gone"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#, "when.type"),
            (#"{"name": "n", "when": {"type": "frequency", "windowMinutes": 5}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#, "when.count"),
            (
                #"{"name": "n", "when": {"type": "frequency", "count": 0, "windowMinutes": 5}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "when.count"
            ),
            (
                #"{"name": "n", "when": {"type": "devices", "count": 5, "windowMinutes": 10081}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "when.windowMinutes"
            ),
            (
                #"{"name": "n", "when": {"type": "frequency", "count": "5", "windowMinutes": 5}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "when.count"
            ),
            (
                #"{"name": "n", "when": {"type": "crashFreeSessions", "below": 1.5}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "when.below"
            ),
            (
                #"{"name": "n", "when": {"type": "crashFreeSessions", "below": 0.99, "release": ""}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "when.release"
            ),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "filters": {"colour": "red"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.colour"
            ),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "filters": {"kind": "weird"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.kind"
            ),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "filters": {"version": []}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.version"
            ),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "filters": {"fatal": "yes"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.fatal"
            ),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "filters": {"context": {}}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.context"
            ),
            (
                #"{"name": "n", "when": {"type": "spike"}, "filters": {"os": "iOS"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.os"
            ),
            (
                #"{"name": "n", "when": {"type": "crashFreeSessions", "below": 0.99}, "filters": {"kind": "signal"}, "actions": [{"type": "webhook", "webhook": "HOOK"}]}"#,
                "filters.kind"
            ),
            (#"{"name": "n", "when": {"type": "group.new"}, "actions": []}"#, "actions"),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "HOOK"}, {"type": "pager"}]}"#,
                "actions[1].type"
            ),
            (#"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "999999999"}]}"#, "actions[0].webhook"),
            (#"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "email", "to": ["ana@example.com"]}]}"#, "actions[0].type"),
            (
                #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "HOOK"}], "throttleMinutes": 4}"#,
                "throttleMinutes"
            ),
            (#"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "HOOK"}], "enabled": 1}"#, "enabled"),
        ])
    func validation(body: String, field: String) async throws {
        let p = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: "https://example.com/hook", events: ["group.new"])
            let base = "/v1/projects/\(p.project)/alert-rules"
            let response = try await client.query(
                base, token: p.readToken, method: .post, body: body.replacingOccurrences(of: "HOOK", with: hook.id))
            #expect(response.status == .badRequest)
            #expect(response.json.error.hasPrefix("\(field):"), "\(response.json.error)")
            #expect((try await client.query(base, token: p.readToken).json["rules"] as? [Any])?.isEmpty == true)
        }
    }

    @Test("a project has at most 100 rules")
    func limit() async throws {
        let p = try await makeProject()
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: "https://example.com/hook", events: [])
            let body = #"{"name": "n", "when": {"type": "group.new"}, "actions": [{"type": "webhook", "webhook": "\#(hook.id)"}]}"#
            for _ in 0..<100 {
                #expect(
                    try await client.query("/v1/projects/\(p.project)/alert-rules", token: p.readToken, method: .post, body: body).status == .created)
            }
            let over = try await client.query("/v1/projects/\(p.project)/alert-rules", token: p.readToken, method: .post, body: body)
            #expect(over.status == .badRequest)
        }
    }
}
