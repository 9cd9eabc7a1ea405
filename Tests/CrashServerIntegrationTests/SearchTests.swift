import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// triage.md's environments and search (`q=`) against the real database: the report field on
/// both doors, the `environment` filter on the list, detail, reports and stats, and each search
/// term with hand-counted expectations.
@Suite struct SearchTests {
    static let h = TimeWindow.hour

    /// `environment` on `POST /v1/reports`: kept as sent, `production` when absent, and a report
    /// with an empty, long, non-string or control-character value rejected naming the field.
    @Test func environmentOnOurDoor() async throws {
        let p = try await makeProject()
        let now = Date().addingTimeInterval(-Self.h)
        @Sendable func report(_ environment: Any?) -> [String: Any] {
            var object = queryReport("env door", at: now).object
            if let environment { object["environment"] = environment }
            return object
        }
        try await withApp { client in
            let sent: [Any?] = ["staging", nil, "", String(repeating: "e", count: 65), 5, "a\u{1}b", String(repeating: "e", count: 64)]
            let response = try await client.ingest(key: p.ingestKey, body: batchBody(sent.map(report)))
            #expect(response.status == .accepted)
            let body = try response.decode(IngestResponse.self)
            #expect(body.accepted == 3)
            #expect(body.rejected.map(\.index) == [2, 3, 4, 5])
            #expect(body.rejected.allSatisfy { $0.error.hasPrefix("environment: ") }, "\(body.rejected)")
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let reports = try await client.query("/v1/projects/\(p.project)/crashes/\(id)/reports", token: p.readToken)
            let environments = (reports.json["reports"] as? [[String: Any]] ?? []).compactMap { $0["environment"] as? String }
            #expect(environments.sorted() == [String(repeating: "e", count: 64), "production", "staging"])
        }
    }

    /// A Sentry event's `environment` becomes the report's (absent or invalid: `production`) and
    /// stays in `context`.
    @Test func environmentOnTheSentryDoor() async throws {
        let p = try await makeProject()
        try await withApp { client in
            for environment in ["staging-eu", "", nil] as [String?] {
                var event = SentryIngestTests.event()
                event["environment"] = environment
                let answer = try await client.sentry(
                    "/api/\(p.sentryId)/envelope/", headers: SentryIngestTests.auth(p.ingestKey),
                    body: SentryIngestTests.eventEnvelope(event))
                #expect(answer.status == .ok)
            }
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let reports = try await client.query("/v1/projects/\(p.project)/crashes/\(id)/reports", token: p.readToken)
            let rows = reports.json["reports"] as? [[String: Any]] ?? []
            #expect(rows.compactMap { $0["environment"] as? String }.sorted() == ["production", "production", "staging-eu"])
            let staging = try #require(rows.first { $0["environment"] as? String == "staging-eu" })
            #expect((staging["context"] as? [String: String])?["environment"] == "staging-eu")
            let filtered = try await client.query("/v1/projects/\(p.project)/crashes?environment=staging-eu", token: p.readToken)
            #expect(filtered.json.groups.map { $0["count"] as? Int } == [1])
        }
    }

    /// `environment=` on the list, a group's detail and reports, and the stats: counts, devices,
    /// first and last seen, breakdown, latest, series; repeated means any; unknown matches nothing.
    @Test func environmentFilterOnEveryQuery() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 3)
        let h = Self.h
        @Sendable func at(_ hours: Double) -> Date { base.addingTimeInterval(hours * h) }
        @Sendable func report(_ reason: String, _ hours: Double, _ environment: String?, device: String = "d1") -> TestReport {
            var object = queryReport(reason, at: at(hours), device: device).object
            if let environment { object["environment"] = environment }
            return TestReport(object: object)
        }
        let reports = [
            report("alpha", 1, nil, device: "d1"), report("alpha", 2.5, "staging", device: "d2"),
            report("alpha", 30, "staging", device: "d3"), report("alpha", 31, "dev", device: "d1"),
            report("beta", 3, nil), report("beta", 40, nil, device: "d2"), report("beta", 41, "production", device: "d3"),
        ]
        let window = "from=\(q(base))&to=\(q(at(60)))"
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let path = "/v1/projects/\(p.project)"
            let all = try await client.query("\(path)/crashes?\(window)", token: p.readToken)
            #expect(all.json.groups.titles == ["alpha", "beta"])
            let staging = try await client.query("\(path)/crashes?\(window)&environment=staging", token: p.readToken)
            #expect(staging.json.groups.titles == ["alpha"])
            let alpha = try #require(staging.json.groups.first)
            #expect(alpha["count"] as? Int == 2)
            #expect(alpha["devices"] as? Int == 2)
            #expect(alpha["firstSeen"] as? String == RFC3339.format(at(2.5)))
            #expect(alpha["lastSeen"] as? String == RFC3339.format(at(30)))
            let production = try await client.query("\(path)/crashes?\(window)&environment=production", token: p.readToken)
            #expect(production.json.groups.titles == ["beta", "alpha"])
            #expect(production.json.groups.map { $0["count"] as? Int } == [3, 1])
            #expect(production.json.groups.titled("alpha")?["lastSeen"] as? String == RFC3339.format(at(1)))
            let either = try await client.query("\(path)/crashes?\(window)&environment=staging&environment=dev", token: p.readToken)
            #expect(either.json.groups.map { $0["count"] as? Int } == [3])
            let byLastSeen = try await client.query("\(path)/crashes?\(window)&environment=production&sort=lastSeen", token: p.readToken)
            #expect(byLastSeen.json.groups.titles == ["beta", "alpha"])
            let unknown = try await client.query("\(path)/crashes?\(window)&environment=nowhere", token: p.readToken)
            #expect(unknown.status == .ok && unknown.json.groups.isEmpty)
            for bad in ["environment=", "environment=\(String(repeating: "e", count: 65))", "environment=a%01b"] {
                let answer = try await client.query("\(path)/crashes?\(bad)", token: p.readToken)
                #expect(answer.status == .badRequest)
                #expect((answer.json["error"] as? String)?.hasPrefix("environment") == true, "\(bad): \(answer.json)")
            }

            let id = try #require(alpha["id"] as? String)
            let detail = try await client.query("\(path)/crashes/\(id)?\(window)&environment=staging", token: p.readToken)
            #expect(detail.json["count"] as? Int == 2)
            let histogram = detail.json["histogram"] as? [[String: Any]] ?? []
            #expect(histogram.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == 2)
            let breakdown = detail.json["breakdown"] as? [String: Any] ?? [:]
            #expect((breakdown["environments"] as? [[String: Any]])?.map { $0["value"] as? String } == ["staging"])
            #expect((breakdown["versions"] as? [[String: Any]])?.map { $0["count"] as? Int } == [2])
            #expect((detail.json["latest"] as? [[String: Any]])?.map { $0["environment"] as? String } == ["staging", "staging"])
            let whole = try await client.query("\(path)/crashes/\(id)?\(window)", token: p.readToken)
            let environments = (whole.json["breakdown"] as? [String: Any])?["environments"] as? [[String: Any]] ?? []
            #expect(environments.map { "\($0["value"] ?? ""):\($0["count"] ?? "")" } == ["staging:2", "dev:1", "production:1"])
            let listed = try await client.query("\(path)/crashes/\(id)/reports?environment=dev", token: p.readToken)
            #expect((listed.json["reports"] as? [[String: Any]])?.map { $0["environment"] as? String } == ["dev"])

            let stats = try await client.query("\(path)/stats?\(window)&interval=day&groupBy=environment", token: p.readToken)
            let series = stats.json["series"] as? [[String: Any]] ?? []
            #expect(series.map { $0["key"] as? String } == ["production", "staging", "dev"])
            let total = { (s: [String: Any]) in (s["points"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["count"] as? Int ?? 0) } }
            #expect(series.map(total) == [4, 2, 1])
            let onlyDev = try await client.query("\(path)/stats?\(window)&interval=day&environment=dev", token: p.readToken)
            #expect((onlyDev.json["series"] as? [[String: Any]])?.map(total) == [1])
        }
    }

    /// Each search term on the list, with its counts: group terms select groups, report terms
    /// select the reports counted, `!` negates, and ignored groups show only when a status is named.
    @Test func searchTermsSelectGroupsAndReports() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 2)
        @Sendable func at(_ hours: Double) -> Date { base.addingTimeInterval(hours * Self.h) }
        let reports = [
            queryReport(
                "-[__NSArrayI objectAtIndex:]: index 5 beyond bounds", at: at(1), kind: "container", version: "2.4", fatal: true,
                context: ["screen": "checkout"]),
            queryReport(
                "-[__NSArrayI objectAtIndex:]: index 5 beyond bounds", at: at(2), kind: "container", version: "2.4",
                context: ["screen": "check out"]),
            queryReport("-[__NSArrayI objectAtIndex:]: index 5 beyond bounds", at: at(3), kind: "container", version: "2.5", os: "Android"),
            queryReport("KVO observer removed twice", at: at(4), kind: "kvo", version: "2.4", context: ["screen": "checkout"]),
            queryReport("Timer fired on a freed target", at: at(5), kind: "timer", version: "2.5", fatal: true),
        ]
        let path = "/v1/projects/\(p.project)/crashes?from=\(q(base))&to=\(q(at(24)))"
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            func search(_ q: String) async throws -> [String] {
                let encoded = q.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let answer = try await client.query(path + "&q=\(encoded)", token: p.readToken)
                #expect(answer.status == .ok, "\(q): \(answer.json)")
                // Sorted: groups of equal count are in id order, and ids follow the signatures.
                return answer.json.groups.map { "\(($0["title"] as? String ?? "").prefix(3)):\($0["count"] as? Int ?? -1)" }.sorted()
            }
            #expect(try await search("") == ["-[_:3", "KVO:1", "Tim:1"])
            #expect(try await search("   ") == ["-[_:3", "KVO:1", "Tim:1"])
            #expect(try await search("objectatindex") == ["-[_:3"])
            // Titles are normalized reasons: `index <n> beyond bounds`.
            #expect(try await search("\"<n> beyond BOUNDS\"") == ["-[_:3"])
            #expect(try await search("!\"beyond bounds\"") == ["KVO:1", "Tim:1"])
            #expect(try await search("kind:kvo") == ["KVO:1"])
            #expect(try await search("!kind:kvo !kind:timer") == ["-[_:3"])
            #expect(try await search("version:2.4") == ["-[_:2", "KVO:1"])
            #expect(try await search("release:2.5") == ["-[_:1", "Tim:1"])
            #expect(try await search("!version:2.4") == ["-[_:1", "Tim:1"])
            #expect(try await search("os:Android") == ["-[_:1"])
            #expect(try await search("fatal:true") == ["-[_:1", "Tim:1"])
            #expect(try await search("fatal:false") == ["-[_:2", "KVO:1"])
            #expect(try await search("fatal:true fatal:false").isEmpty)
            #expect(try await search("screen:checkout") == ["-[_:1", "KVO:1"])
            #expect(try await search("screen:\"check out\"") == ["-[_:1"])
            #expect(try await search("!screen:checkout") == ["-[_:2", "Tim:1"])
            #expect(try await search("environment:production version:2.4 objectAtIndex") == ["-[_:2"])
            #expect(try await search("environment:staging").isEmpty)
            #expect(try await search("firstSeen:-7d") == ["-[_:3", "KVO:1", "Tim:1"])
            #expect(try await search("firstSeen:+7d").isEmpty)
            #expect(try await search("lastSeen:>=\(RFC3339.format(at(4)))") == ["KVO:1", "Tim:1"])
            #expect(try await search("is:unassigned is:open") == ["-[_:3", "KVO:1", "Tim:1"])
            #expect(try await search("is:assigned").isEmpty)
            #expect(try await search("is:resolved").isEmpty)

            // Ignored groups: hidden unless a status is named (negated or not).
            let kvo = try #require(try await client.query(path + "&kind=kvo", token: p.readToken).json.groups.first?["id"] as? String)
            let patched = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(kvo)", token: p.readToken, method: .patch, body: #"{"status": "ignored"}"#)
            #expect(patched.status == .ok)
            #expect(try await search("version:2.4") == ["-[_:2"])
            #expect(try await search("is:ignored") == ["KVO:1"])
            #expect(try await search("!is:resolved") == ["-[_:3", "KVO:1", "Tim:1"])
            #expect(try await search("!is:ignored") == ["-[_:3", "Tim:1"])
            #expect(try await search("is:assigned").isEmpty)

            for bad in ["is:nope", "kind:crash", "fatal:yes", "firstSeen:=-1d", "lastSeen:>-1y", "version:", "!", "\"open"] {
                let encoded = bad.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let answer = try await client.query(path + "&q=\(encoded)", token: p.readToken)
                #expect(answer.status == .badRequest, "\(bad)")
                #expect((answer.json["error"] as? String)?.hasPrefix("q: ") == true, "\(bad): \(answer.json)")
            }
            let long = String(repeating: "a", count: 2049)
            #expect(try await client.query(path + "&q=\(long)", token: p.readToken).status == .badRequest)
        }
    }
}
