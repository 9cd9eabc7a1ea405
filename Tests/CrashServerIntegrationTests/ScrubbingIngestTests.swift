import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// data-protection.md, "Scrubbing": every door scrubs before anything is grouped or stored,
/// against real PostgreSQL; reports read back say whether they were scrubbed.
@Suite("Scrubbing at ingest")
struct ScrubbingIngestTests {
    /// Every text column of the project's stored reports and groups, concatenated.
    static func storedText(_ slug: String) async throws -> String {
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT concat_ws(' ', r.reason, r.stack, r.fingerprint, r.context, g.title, g.normalized_reason)
                FROM reports r JOIN crash_groups g ON g.id = r.group_id JOIN projects p ON p.id = r.project_id
                WHERE p.slug = \(slug)
                """, logger: db.logger)
            var text = ""
            for try await row in rows.decode(String.self) { text += row + "\n" }
            return text
        }
    }

    static func patch(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ body: String) async throws {
        let answer = try await client.query("/v1/projects/\(p.project)/settings", token: p.readToken, method: .patch, body: body)
        #expect(answer.status == .ok, "\(answer.json)")
    }

    /// The reports of the project's group whose title contains `title`, as the reports list answers them.
    static func reports(
        _ client: some TestClientProtocol, _ p: ProjectCredentials, titled title: String
    ) async throws -> [[String: Any]] {
        let groups = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken).json.groups
        let group = try #require(groups.first { ($0["title"] as? String)?.contains(title) == true }, "\(groups.titles)")
        let id = try #require(group["id"] as? String)
        return try await client.query("/v1/projects/\(p.project)/crashes/\(id)/reports", token: p.readToken).json["reports"]
            as? [[String: Any]] ?? []
    }

    @Test("/v1/reports, the Sentry door and the Apple door store no password, bearer token or card number")
    func everyDoor() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            // /v1/reports: two reports differing only by a card number, with secrets in every scrubbed field.
            let secret: [[String: Any]] = ["4111 1111 1111 1111", "5555-5555-5555-4444"].map { card in
                queryReport(
                    "payment declined for card \(card) with Bearer eyJhbGciOi.abc", at: now, kind: "exception",
                    stack: ["0 Shop 0x1 -[Pay charge:] + 4", "1 Shop https://bob:s3cret@api.example.com/pay?token=t0k"],
                    context: ["password": "hunter2", "user": "ana"]
                ).object
            }
            let clean = queryReport("index 5 beyond bounds", at: now, kind: "container").object
            let answer = try await client.ingest(key: p.ingestKey, body: batchBody(secret + [clean]))
            #expect(answer.status == .accepted)
            #expect(try answer.decode(IngestResponse.self).accepted == 3)

            // The Sentry door: the exception value is the reason, tags are context.
            var event = SentryIngestTests.event(type: "AuthError", value: "login failed password=hunter2 card 4111111111111111")
            event["tags"] = ["api_key": "k-123", "region": "eu"]
            let sentry = try await client.sentry(
                "/api/\(p.sentryId)/envelope/", headers: SentryIngestTests.auth(p.ingestKey),
                body: SentryIngestTests.eventEnvelope(event))
            #expect(sentry.status == .ok)

            // The Apple door: an uncaught exception's message is the reason.
            var (header, body) = try AppleIngestTests.ipsParts("crash-segv.ips")
            body["exceptionReason"] = ["name": "NSInvalidArgumentException", "composed_message": "sign-in with Bearer abc.def failed"]
            let apple = try await AppleIngestTests.post(client, key: p.ingestKey, body: AppleIngestTests.ips(header, body))
            #expect(apple.status == .accepted, "\(apple.errorMessage ?? "")")

            let stored = try await Self.storedText(p.project)
            for leaked in ["hunter2", "4111", "5555", "eyJhbGciOi", "s3cret", "t0k", "k-123", "abc.def"] {
                #expect(!stored.contains(leaked), "\(leaked) stored: \(stored)")
            }
            #expect(stored.contains("Bearer [Filtered]") && stored.contains("password=[Filtered]"))

            // One group for the two card numbers; read back as scrubbed, the clean one not.
            let title = "payment declined for card [Filtered] with Bearer [Filtered]"
            let reports = try await Self.reports(client, p, titled: title)
            #expect(reports.count == 2)
            #expect(reports.allSatisfy { $0["scrubbed"] as? Bool == true })
            let first = try #require(reports.first)
            #expect((first["context"] as? [String: String]) == ["password": "[Filtered]", "user": "ana"])
            #expect((first["stack"] as? [String])?.last == "1 Shop https://bob:[Filtered]@api.example.com/pay?token=[Filtered]")
            #expect(try await Self.reports(client, p, titled: "beyond bounds").first?["scrubbed"] as? Bool == false)
            let groups = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken).json.groups
            #expect(groups.count == 4, "\(groups.titles)")
            let detail = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(try #require(groups.titled(title)?["id"] as? String))", token: p.readToken)
            #expect((detail.json["latest"] as? [[String: Any]])?.allSatisfy { $0["scrubbed"] as? Bool == true } == true)

            // /metrics counts them by door.
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(buffer: metrics.body)
            #expect(text.contains(#"crashguard_reports_scrubbed_total{door="reports"}"#), "\(text.prefix(200))")
            #expect(text.contains(#"crashguard_reports_scrubbed_total{door="sentry"}"#))
            #expect(text.contains(#"crashguard_reports_scrubbed_total{door="apple"}"#))
        }
    }

    @Test("settings: IPs, e-mails, extra and safe fields, patterns; scrubDefaults off keeps the extra fields only")
    func settingsToggles() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await Self.patch(
                client, p,
                #"{"scrubIPs": true, "scrubEmails": true, "sensitiveFields": ["pin"], "safeFields": ["author", "session_note"], "patterns": ["ord-[0-9]+", "(?i)acme-[a-z]+"]}"#
            )
            let report = queryReport(
                "order ord-123 ORD-456 for ana@example.com from 10.1.2.3 via Acme-Widget", at: now,
                context: ["pin": "1234", "author": "bob", "session_note": "token=keep", "note": "ord-9 fe80::1"])
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([report.object])).status == .accepted)
            let stored = try #require(
                try await Self.reports(client, p, titled: "for [email] from [ip] via [Filtered]").first)
            #expect(stored["reason"] as? String == "order [Filtered] ORD-456 for [email] from [ip] via [Filtered]")
            #expect(
                stored["context"] as? [String: String] == [
                    "pin": "[Filtered]", "author": "bob", "session_note": "token=keep", "note": "[Filtered] [ip]",
                ])

            // Without the defaults, a password and a card stay; the extra key word still applies.
            try await Self.patch(client, p, #"{"scrubDefaults": false, "scrubIPs": false, "scrubEmails": false, "patterns": []}"#)
            let plain = queryReport(
                "plain password=x card 4111 1111 1111 1111", at: now, context: ["pin": "1234", "password": "x"])
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([plain.object])).status == .accepted)
            let kept = try #require(try await Self.reports(client, p, titled: "plain password=x").first)
            #expect(kept["reason"] as? String == "plain password=x card 4111 1111 1111 1111")
            #expect(kept["context"] as? [String: String] == ["pin": "[Filtered]", "password": "x"])
            #expect(kept["scrubbed"] as? Bool == true)
        }
    }

    @Test("catastrophic patterns leave ingest fast: 100 reports of 8 KiB against a baseline without patterns")
    func adversarialPatterns() async throws {
        let p = try await makeProject()
        let baseline = try await makeProject()
        try await withApp { client in
            // The first three backtrack exponentially elsewhere; the last would search again after each match.
            try await Self.patch(client, p, #"{"patterns": ["(a+)+$", "(x+x+)+y", "(a|aa)*c", "a.*b|a"]}"#)
            let reason = String(repeating: "a", count: 8000) + "!"
            func body() -> [UInt8] {
                batchBody((0..<100).map { _ in queryReport(reason, at: Date(), stack: [String(repeating: "a", count: 1000)]).object })
            }
            var start = ContinuousClock.now
            #expect(try await client.ingest(key: baseline.ingestKey, body: body()).status == .accepted)
            let plain = ContinuousClock.now - start
            start = ContinuousClock.now
            #expect(try await client.ingest(key: p.ingestKey, body: body()).status == .accepted)
            let patterned = ContinuousClock.now - start
            // A backtracking engine would not finish; RE2 with the budget costs milliseconds.
            #expect(patterned < plain * 10 + .seconds(3), "\(patterned) against \(plain)")
            // `a.*b|a` ran out of its budget on the long strings: each is [Filtered] whole (fail closed).
            let stored = try #require(try await Self.reports(client, p, titled: "[Filtered]").first)
            #expect(stored["reason"] as? String == "[Filtered]" && stored["stack"] as? [String] == ["[Filtered]"])
        }
    }
}
