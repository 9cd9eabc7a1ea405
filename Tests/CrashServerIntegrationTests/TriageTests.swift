import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// triage.md's actions against the real database: assignment, snooze (time, reports,
/// devices), the activity timeline and comments, bulk changes; each through the REST routes.
@Suite struct TriageTests {
    /// One group of `reason` with one report; returns its id.
    private func group(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ reason: String) async throws -> String {
        try await client.send([queryReport(reason, at: Date().addingTimeInterval(-60))], key: p.ingestKey)
        let list = try await client.query("/v1/projects/\(p.project)/crashes?status=open", token: p.readToken)
        return try #require(list.json.groups.titled(reason)?["id"] as? String)
    }

    private func patch(
        _ client: some TestClientProtocol, _ p: ProjectCredentials, _ id: String, _ body: String
    ) async throws -> (status: HTTPResponse.Status, json: [String: Any]) {
        try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken, method: .patch, body: body)
    }

    private func activity(
        _ client: some TestClientProtocol, _ p: ProjectCredentials, _ id: String
    ) async throws -> [[String: Any]] {
        let answer = try await client.query("/v1/projects/\(p.project)/crashes/\(id)/activity?limit=200", token: p.readToken)
        #expect(answer.status == .ok)
        return answer.json["activity"] as? [[String: Any]] ?? []
    }

    @Test func patchBodiesAreCheckedFieldByField() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "checked")
            let later = RFC3339.format(Date().addingTimeInterval(3600))
            let cases: [(String, String)] = [
                ("not json", #"status: body must be a JSON object like {"status": "resolved", "resolvedIn": "1.4.0"}"#),
                ("[1]", #"status: body must be a JSON object like {"status": "resolved", "resolvedIn": "1.4.0"}"#),
                ("{}", "status: required, a string"),
                (#"{"status": 3}"#, "status: required, a string"),
                (#"{"status": "regressed"}"#, "status: must be resolved, ignored or open"),
                (#"{"status": "resolved", "resolvedIn": 4}"#, "resolvedIn: must be a version string of 1 to 128 bytes"),
                (#"{"status": "resolved", "resolvedIn": ""}"#, "resolvedIn: must be a version string of 1 to 128 bytes"),
                (#"{"assignee": "no-at-sign"}"#, "assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null"),
                (#"{"assignee": "a@b@c"}"#, "assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null"),
                (#"{"assignee": "a b@c"}"#, "assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null"),
                (#"{"assignee": "@c"}"#, "assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null"),
                (#"{"assignee": 7}"#, "assignee: must be an e-mail address (3 to 254 bytes, one @, no white space) or null"),
                (#"{"status": "open", "untilCount": 3}"#, "untilCount: a snooze condition needs status ignored"),
                (#"{"status": "ignored", "untilCount": 0}"#, "untilCount: must be an integer from 1 to 1000000"),
                (#"{"status": "ignored", "untilCount": 1000001}"#, "untilCount: must be an integer from 1 to 1000000"),
                (#"{"status": "ignored", "untilDevices": 1.5}"#, "untilDevices: must be an integer from 1 to 1000000"),
                (#"{"status": "ignored", "untilDevices": true}"#, "untilDevices: must be an integer from 1 to 1000000"),
                (#"{"status": "ignored", "until": "tomorrow"}"#, "until: must be an RFC 3339 time"),
                (#"{"status": "ignored", "until": "2001-01-01T00:00:00Z"}"#, "until: must be after now and at most 366 days ahead"),
                (#"{"status": "ignored", "until": "\#(later)", "untilCount": 2}"#, "untilCount: at most one of until, untilCount and untilDevices"),
            ]
            for (body, message) in cases {
                let answer = try await patch(client, p, id, body)
                #expect(answer.status == .badRequest, "\(body)")
                #expect(answer.json["error"] as? String == message, "\(body)")
            }
            // Nothing was changed or recorded by the refused bodies.
            #expect(try await activity(client, p, id).map { $0["type"] as? String } == ["created"])
            let resolved = try await patch(client, p, id, #"{"status": "resolved", "resolvedIn": "1.4.0"}"#)
            #expect(resolved.status == .ok)
            #expect(resolved.json["status"] as? String == "resolved" && resolved.json["resolvedIn"] as? String == "1.4.0")
            #expect(resolved.json["assignee"] is NSNull && resolved.json["snoozed"] is NSNull && resolved.json["mergedInto"] is NSNull)
            #expect(resolved.json["merged"] as? [String] == [])
            let ignored = try await patch(client, p, id, #"{"status": "ignored", "resolvedIn": "1.4.0"}"#)
            #expect(ignored.json["status"] as? String == "ignored" && ignored.json["resolvedIn"] is NSNull)
            let other = try await makeProject()
            let foreign = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(id)", token: other.readToken, method: .patch, body: #"{"status": "open"}"#)
            #expect(foreign.status == .notFound)
            #expect(try await patch(client, p, "999999999", #"{"status": "open"}"#).status == .notFound)
        }
    }

    @Test func assigneeAndStatusChangesWriteTheirEntriesAndNoOpsNone() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "assigned")
            let assigned = try await patch(client, p, id, #"{"assignee": "Ana@Example.com"}"#)
            #expect(assigned.status == .ok)
            #expect(assigned.json["assignee"] as? String == "Ana@Example.com")
            #expect(assigned.json["status"] as? String == "open")
            // The same assignee, the same status: nothing is written.
            #expect(try await patch(client, p, id, #"{"assignee": "Ana@Example.com", "status": "open"}"#).status == .ok)
            // Status and assignee in one body: two entries.
            let both = try await patch(client, p, id, #"{"status": "resolved", "resolvedIn": "2.0", "assignee": "bo@example.com"}"#)
            #expect(both.json["assignee"] as? String == "bo@example.com" && both.json["status"] as? String == "resolved")
            let cleared = try await patch(client, p, id, #"{"assignee": null}"#)
            #expect(cleared.json["assignee"] is NSNull && cleared.json["status"] as? String == "resolved")
            #expect(try await patch(client, p, id, #"{"assignee": null}"#).status == .ok)
            #expect(try await patch(client, p, id, #"{"status": "open"}"#).status == .ok)

            let entries = try await activity(client, p, id)
            #expect(entries.map { $0["type"] as? String } == ["reopened", "unassigned", "assigned", "resolved", "assigned", "created"])
            #expect(entries.map { $0["actor"] as? String } == ["read token", "read token", "read token", "read token", "read token", "system"])
            #expect(entries[1]["data"] as? [String: String] == ["assignee": "bo@example.com"])
            #expect(entries[2]["data"] as? [String: String] == ["assignee": "bo@example.com"])
            #expect(entries[3]["data"] as? [String: String] == ["resolvedIn": "2.0"])
            #expect(entries[4]["data"] as? [String: String] == ["assignee": "Ana@Example.com"])
            #expect((entries[0]["data"] as? [String: Any])?.isEmpty == true)
            let ids = entries.compactMap { $0["id"] as? String }
            #expect(Set(ids).count == entries.count)
            let times = entries.compactMap { ($0["at"] as? String).flatMap(RFC3339.parse) }
            #expect(times.count == entries.count && times == times.sorted(by: >))

            // Pages of 2 walk the same timeline, each entry once.
            var walked: [String] = []
            var cursor: String?
            repeat {
                let page = try await client.query(
                    "/v1/projects/\(p.project)/crashes/\(id)/activity?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""),
                    token: p.readToken)
                let items = page.json["activity"] as? [[String: Any]] ?? []
                #expect(items.count <= 2)
                walked += items.compactMap { $0["id"] as? String }
                cursor = page.json["nextCursor"] as? String
            } while cursor != nil
            #expect(walked == ids)
            let bad = try await client.query("/v1/projects/\(p.project)/crashes/\(id)/activity?cursor=zz", token: p.readToken)
            #expect(bad.status == .badRequest && (bad.json["error"] as? String)?.hasPrefix("cursor:") == true)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes/\(id)/activity", token: nil).status == .unauthorized)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes/999999999/activity", token: p.readToken).status == .notFound)
        }
    }

    @Test func aRegressionIsASystemEntryNamingTheVersion() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "regressing")
            _ = try await patch(client, p, id, #"{"status": "resolved", "resolvedIn": "2.0"}"#)
            try await client.send([queryReport("regressing", at: Date().addingTimeInterval(-10), version: "1.9")], key: p.ingestKey)
            try await client.send([queryReport("regressing", at: Date().addingTimeInterval(-5), version: "2.1")], key: p.ingestKey)
            let entries = try await activity(client, p, id)
            #expect(entries.map { $0["type"] as? String } == ["regressed", "resolved", "created"])
            #expect(entries[0]["actor"] as? String == "system")
            #expect(entries[0]["data"] as? [String: String] == ["version": "2.1"])
        }
    }

    @Test func commentsAreAddedAsSentAndChecked() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "commented")
            let path = "/v1/projects/\(p.project)/crashes/\(id)/comments"
            let text = "Fixed by <b>#42</b> — \"quoted\" \u{1F41B}"
            let body = String(decoding: try JSONSerialization.data(withJSONObject: ["text": text]), as: UTF8.self)
            let added = try await client.query(path, token: p.readToken, method: .post, body: body)
            #expect(added.status == .created)
            #expect(added.json["type"] as? String == "comment" && added.json["actor"] as? String == "read token")
            #expect(added.json["data"] as? [String: String] == ["text": text])
            for bad in [#"{"text": ""}"#, #"{"text": 5}"#, "{}", #"{"text": "\#(String(repeating: "x", count: 4097))"}"#] {
                let answer = try await client.query(path, token: p.readToken, method: .post, body: bad)
                #expect(answer.status == .badRequest, "\(bad.prefix(40))")
                #expect((answer.json["error"] as? String)?.hasPrefix("text:") == true)
            }
            let longest = #"{"text": "\#(String(repeating: "x", count: 4096))"}"#
            #expect(try await client.query(path, token: p.readToken, method: .post, body: longest).status == .created)
            let entries = try await activity(client, p, id)
            #expect(entries.map { $0["type"] as? String } == ["comment", "comment", "created"])
            #expect(entries[1]["id"] as? String == added.json["id"] as? String)
            let foreign = try await makeProject()
            #expect(try await client.query(path, token: foreign.readToken, method: .post, body: body).status == .notFound)
        }
    }

    @Test func snoozeUntilCountReopensWithTheNthNewReport() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "counted")
            let hook = try await client.query(
                "/v1/projects/\(p.project)/webhooks", token: p.readToken, method: .post,
                body: #"{"url": "https://hooks.example.com/x", "events": ["group.reappeared"]}"#)
            let webhook = try #require(hook.json["id"] as? String)
            let snoozed = try await patch(client, p, id, #"{"status": "ignored", "untilCount": 3}"#)
            #expect(snoozed.json["status"] as? String == "ignored")
            let snooze = try #require(snoozed.json["snoozed"] as? [String: Any])
            #expect(snooze["untilCount"] as? Int == 3 && snooze["count"] as? Int == 0 && snooze["since"] is String)
            // Hidden by default, listed with is-ignored.
            let hidden = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(hidden.json.groups.titled("counted") == nil)

            let twice = queryReport("counted", at: Date().addingTimeInterval(-30))
            try await client.send([twice, queryReport("counted", at: Date().addingTimeInterval(-20))], key: p.ingestKey)
            try await client.send([twice], key: p.ingestKey)  // a duplicate counts for nothing
            let detail = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(detail.json["status"] as? String == "ignored")
            #expect((detail.json["snoozed"] as? [String: Any])?["count"] as? Int == 2)
            #expect(try await withTestDatabase { try await $0.deliveryEvents(webhook: webhook) } == [])

            try await client.send([queryReport("counted", at: Date().addingTimeInterval(-10))], key: p.ingestKey)
            let reopened = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(reopened.json["status"] as? String == "open")
            #expect(reopened.json["snoozed"] is NSNull)
            let entries = try await activity(client, p, id)
            #expect(entries.map { $0["type"] as? String } == ["reappeared", "snoozed", "created"])
            #expect(entries[0]["actor"] as? String == "system")
            #expect(entries[0]["data"] as? [String: Int] == ["untilCount": 3])
            #expect(entries[1]["data"] as? [String: Int] == ["untilCount": 3])
            #expect(try await withTestDatabase { try await $0.deliveryEvents(webhook: webhook) } == ["group.reappeared"])
            // Open again: further reports reopen nothing and queue nothing.
            try await client.send([queryReport("counted", at: Date().addingTimeInterval(-5))], key: p.ingestKey)
            #expect(try await withTestDatabase { try await $0.deliveryEvents(webhook: webhook) } == ["group.reappeared"])
        }
    }

    @Test func snoozeUntilDevicesCountsDistinctNewDevices() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "devices")
            _ = try await patch(client, p, id, #"{"status": "ignored", "untilDevices": 2}"#)
            let t = Date().addingTimeInterval(-30)
            // The device of the report before the snooze, twice, and a report without a device: one device.
            try await client.send(
                [
                    queryReport("devices", at: t, device: "device-1"), queryReport("devices", at: t, device: "device-1"),
                    queryReport("devices", at: t, device: nil),
                ], key: p.ingestKey)
            let one = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(one.json["status"] as? String == "ignored")
            let snooze = one.json["snoozed"] as? [String: Any]
            #expect(snooze?["untilDevices"] as? Int == 2 && snooze?["devices"] as? Int == 1)
            try await client.send([queryReport("devices", at: t, device: "device-2")], key: p.ingestKey)
            let two = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            #expect(two.json["status"] as? String == "open")
            #expect(try await activity(client, p, id).first?["data"] as? [String: Int] == ["untilDevices": 2])
            // A new snooze counts from zero again.
            let again = try await patch(client, p, id, #"{"status": "ignored", "untilDevices": 2}"#)
            #expect((again.json["snoozed"] as? [String: Any])?["devices"] as? Int == 0)
        }
    }

    @Test func snoozeUntilATimeReadsOpenFromThenAndReappears() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let id = try await group(client, p, "timed")
            let hook = try await client.query(
                "/v1/projects/\(p.project)/webhooks", token: p.readToken, method: .post,
                body: #"{"url": "https://hooks.example.com/t", "events": ["group.reappeared", "group.new"]}"#)
            let webhook = try #require(hook.json["id"] as? String)
            let until = Date().addingTimeInterval(1.5)
            let snoozed = try await patch(client, p, id, #"{"status": "ignored", "until": "\#(RFC3339.format(until))"}"#)
            #expect(snoozed.json["status"] as? String == "ignored")
            let shown = (snoozed.json["snoozed"] as? [String: Any])?["until"] as? String
            #expect(shown.flatMap(RFC3339.parse).map { abs($0.timeIntervalSince(until)) < 0.001 } == true)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken).json.groups.titled("timed") == nil)
            try await Task.sleep(for: .seconds(2))
            // From `until` on, every read shows the group open, listed by default.
            let listed = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(listed.json.groups.titled("timed")?["status"] as? String == "open")
            #expect(listed.json.groups.titled("timed")?["snoozed"] is NSNull)
            // The app's snooze check (SnoozeWaker) writes it within 10 s of `until`: open, a
            // reappeared entry, the event.
            var entries: [[String: Any]] = []
            let deadline = ContinuousClock.now + .seconds(10)
            repeat {
                entries = try await activity(client, p, id)
                if entries.first?["type"] as? String == "reappeared" { break }
                try await Task.sleep(for: .milliseconds(200))
            } while ContinuousClock.now < deadline
            #expect(entries.map { $0["type"] as? String } == ["reappeared", "snoozed", "created"])
            #expect((entries[0]["data"] as? [String: String])?["until"].flatMap(RFC3339.parse) != nil)
            #expect(try await withTestDatabase { try await $0.deliveryEvents(webhook: webhook) } == ["group.reappeared"])
            // Plain ignore is forever and replaces a snooze; its entry is `ignored`.
            _ = try await patch(client, p, id, #"{"status": "ignored", "untilCount": 5}"#)
            let forever = try await patch(client, p, id, #"{"status": "ignored"}"#)
            #expect(forever.json["snoozed"] is NSNull && forever.json["status"] as? String == "ignored")
            #expect(try await activity(client, p, id).first?["type"] as? String == "ignored")
        }
    }

    @Test func bulkChangesEveryMatchingGroupInOneGo() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let t = Date().addingTimeInterval(-60)
            try await client.send(
                [
                    queryReport("bulk a", at: t, kind: "null"), queryReport("bulk b", at: t, kind: "null"),
                    queryReport("bulk c", at: t, kind: "custom"),
                ], key: p.ingestKey)
            let base = "/v1/projects/\(p.project)/crashes"
            let resolved = try await client.query(
                base + "?kind=null&limit=1&sort=lastSeen", token: p.readToken, method: .patch,
                body: #"{"status": "resolved", "assignee": "ana@example.com"}"#)
            #expect(resolved.status == .ok)
            #expect(resolved.json["updated"] as? Int == 2)
            let all = try await client.query(base + "?status=resolved", token: p.readToken)
            #expect(Set(all.json.groups.titles) == ["bulk a", "bulk b"])
            #expect(all.json.groups.allSatisfy { $0["assignee"] as? String == "ana@example.com" })
            let a = try #require(all.json.groups.titled("bulk a")?["id"] as? String)
            #expect(try await activity(client, p, a).map { $0["type"] as? String } == ["assigned", "resolved", "created"])
            // Ignored groups are hidden by default: ignoring twice matches only what is left.
            let ignored = try await client.query(base, token: p.readToken, method: .patch, body: #"{"status": "ignored"}"#)
            #expect(ignored.json["updated"] as? Int == 3)
            let again = try await client.query(base, token: p.readToken, method: .patch, body: #"{"status": "ignored"}"#)
            #expect(again.json["updated"] as? Int == 0)
            let bad = try await client.query(base + "?kind=nope", token: p.readToken, method: .patch, body: #"{"status": "open"}"#)
            #expect(bad.status == .badRequest && (bad.json["error"] as? String)?.hasPrefix("kind") == true)
            let badBody = try await client.query(base, token: p.readToken, method: .patch, body: #"{"assignee": 1}"#)
            #expect(badBody.status == .badRequest && (badBody.json["error"] as? String)?.hasPrefix("assignee:") == true)
        }
    }

    @Test func bulkOverAThousandGroupsIsRefusedNamingQ() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let t = Date().addingTimeInterval(-60)
            try await client.send((0...1000).map { queryReport("many_\($0)", at: t) }, key: p.ingestKey)
            let base = "/v1/projects/\(p.project)/crashes"
            let refused = try await client.query(base, token: p.readToken, method: .patch, body: #"{"status": "resolved"}"#)
            #expect(refused.status == .badRequest, "\(refused.json)")
            #expect((refused.json["error"] as? String)?.hasPrefix("q:") == true)
            // Nothing changed.
            #expect(try await client.query(base + "?status=resolved", token: p.readToken).json.groups.isEmpty)
        }
    }
}
