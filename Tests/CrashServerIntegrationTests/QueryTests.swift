import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The Query section of the contract against the real database, with hand-computed
/// expectations.
@Suite struct QueryTests {
    @Test func listCountsFiltersAndSorts() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 3)
        let h = TimeWindow.hour
        let reports = [
            // alpha: 4 in the window, 3 devices, versions 1.2.0, 1.10.0, 1.4.0; one fatal
            queryReport("alpha", at: base.addingTimeInterval(1 * h), version: "1.2.0", device: "d1"),
            queryReport("alpha", at: base.addingTimeInterval(2 * h), version: "1.10.0", device: "d2", fatal: true),
            queryReport("alpha", at: base.addingTimeInterval(30 * h), version: "1.10.0", device: "d2"),
            queryReport("alpha", at: base.addingTimeInterval(31 * h), version: "1.4.0", os: "Android", device: "d3"),
            // alpha before the window: counts for firstSeen and versions only
            queryReport("alpha", at: base.addingTimeInterval(-5 * h), version: "0.9", device: "d9"),
            // beta: 2, kind null, Android
            queryReport("beta", at: base.addingTimeInterval(3 * h), kind: "null", os: "Android", device: "d1"),
            queryReport("beta", at: base.addingTimeInterval(50 * h), kind: "null", version: "1.10.0", os: "Android", device: nil),
            // gamma: 2 (ties with beta, created later), other app
            queryReport("gamma", at: base.addingTimeInterval(4 * h), app: "com.example.other", device: "d1"),
            queryReport("gamma", at: base.addingTimeInterval(5 * h), app: "com.example.other", device: "d1"),
        ]
        let from = base, to = base.addingTimeInterval(60 * h)
        try await withApp { client in
            try await client.send(Array(reports.prefix(5)), key: p.ingestKey)
            try await client.send(Array(reports[5...6]), key: p.ingestKey)
            try await client.send(Array(reports[7...]), key: p.ingestKey)
            let path = "/v1/projects/\(p.project)/crashes?from=\(q(from))&to=\(q(to))"
            let all = try await client.query(path, token: p.readToken)
            #expect(all.status == .ok)
            #expect(all.json.groups.titles == ["alpha", "beta", "gamma"])
            #expect(all.json["nextCursor"] is NSNull)
            let alpha = try #require(all.json.groups.titled("alpha"))
            #expect(alpha["count"] as? Int == 4)
            #expect(alpha["devices"] as? Int == 3)
            #expect(alpha["versions"] as? [String] == ["1.10.0", "1.4.0", "1.2.0", "0.9"])
            #expect(alpha["fatal"] as? Bool == true)
            #expect(alpha["status"] as? String == "open")
            #expect(alpha["kind"] as? String == "custom")
            #expect(alpha["firstSeen"] as? String == RFC3339.format(base.addingTimeInterval(-5 * h)))
            #expect(alpha["lastSeen"] as? String == RFC3339.format(base.addingTimeInterval(31 * h)))
            #expect((alpha["signature"] as? String)?.count == 64)
            #expect(all.json.groups.titled("beta")?["devices"] as? Int == 1)
            #expect(all.json.groups.titled("gamma")?["fatal"] as? Bool == false)

            let byVersion = try await client.query(path + "&version=1.10.0", token: p.readToken)
            #expect(byVersion.json.groups.titles == ["alpha", "beta"])
            #expect(byVersion.json.groups.map { $0["count"] as? Int } == [2, 1])
            #expect(byVersion.json.groups.titled("beta")?["devices"] as? Int == 0)
            let byKind = try await client.query(path + "&kind=null", token: p.readToken)
            #expect(byKind.json.groups.titles == ["beta"])
            let byOS = try await client.query(path + "&os=Android", token: p.readToken)
            #expect(byOS.json.groups.titles == ["beta", "alpha"])
            #expect(byOS.json.groups.map { $0["count"] as? Int } == [2, 1])
            let byApp = try await client.query(path + "&app=com.example.other", token: p.readToken)
            #expect(byApp.json.groups.titles == ["gamma"])
            let lastSeen = try await client.query(path + "&sort=lastSeen", token: p.readToken)
            #expect(lastSeen.json.groups.titles == ["beta", "alpha", "gamma"])
            let firstSeen = try await client.query(path + "&sort=firstSeen", token: p.readToken)
            #expect(firstSeen.json.groups.titles == ["gamma", "beta", "alpha"])
            let narrow = try await client.query(
                "/v1/projects/\(p.project)/crashes?from=\(q(base.addingTimeInterval(29 * h)))&to=\(q(to))", token: p.readToken)
            #expect(narrow.json.groups.titles == ["alpha", "beta"])
            #expect(narrow.json.groups.map { $0["count"] as? Int } == [2, 1])
            // Default window: the last 7 days.
            let defaults = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(defaults.json.groups.map { $0["count"] as? Int } == [5, 2, 2])
        }
    }

    /// Whole days, edge hours read directly or as "whole day minus the hours outside",
    /// sub-hour edges: every window shape must give the count of reports in [from, to),
    /// with and without a version filter (the per-version rollups) and with an os filter
    /// (the per-dimension rollups).
    @Test func windowCountsMatchAHandCountForEveryEdgeShape() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 4)
        let h = TimeWindow.hour
        // One report every 50 minutes for 3.5 days; every third one on version 2.0.
        let times = (0..<101).map { base.addingTimeInterval(Double($0) * 3000) }
        let reports = times.enumerated().map { i, t in queryReport("edges", at: t, version: i % 3 == 0 ? "2.0" : "1.0") }
        let shapes: [(Double, Double)] = [
            (0, 84), (1, 83), (3, 47), (13, 70), (20, 50), (23.5, 48.25), (0.4, 24), (11, 13), (25, 26.5), (47, 72), (30, 30.5),
        ]
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            for (a, b) in shapes {
                let from = base.addingTimeInterval(a * h), to = base.addingTimeInterval(b * h)
                let path = "/v1/projects/\(p.project)/crashes?from=\(q(from))&to=\(q(to))"
                for (filter, match) in [("", { (_: Int) in true }), ("&version=2.0", { $0 % 3 == 0 }), ("&os=iOS", { (_: Int) in true })] {
                    let expected = times.enumerated().filter { i, t in t >= from && t < to && match(i) }.count
                    let page = try await client.query(path + filter, token: p.readToken)
                    #expect(page.json.groups.first?["count"] as? Int ?? 0 == expected, "[\(a)h, \(b)h)\(filter)")
                }
                // The detail's breakdown and histogram read the same rollups.
                let id = try #require(
                    try await client.query("/v1/projects/\(p.project)/crashes?limit=1", token: p.readToken).json.groups.first?["id"] as? String)
                let detail = try await client.query(
                    "/v1/projects/\(p.project)/crashes/\(id)?from=\(q(from))&to=\(q(to))", token: p.readToken)
                let inWindow = times.enumerated().filter { $0.element >= from && $0.element < to }
                let v2 = inWindow.filter { $0.offset % 3 == 0 }.count, v1 = inWindow.count - v2
                let expectedVersions = [("1.0", v1), ("2.0", v2)].filter { $0.1 > 0 }.sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }
                let versions = ((detail.json["breakdown"] as? [String: Any])?["versions"] as? [[String: Any]] ?? [])
                #expect(versions.map { $0["value"] as? String ?? "" } == expectedVersions.map(\.0), "[\(a)h, \(b)h)")
                #expect(versions.map { $0["count"] as? Int ?? -1 } == expectedVersions.map(\.1), "[\(a)h, \(b)h)")
                let os = ((detail.json["breakdown"] as? [String: Any])?["os"] as? [[String: Any]] ?? [])
                #expect(os.map { $0["count"] as? Int ?? -1 } == (inWindow.isEmpty ? [] : [inWindow.count]), "[\(a)h, \(b)h)")
                let histogram = detail.json["histogram"] as? [[String: Any]] ?? []
                #expect(histogram.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == inWindow.count, "[\(a)h, \(b)h)")
            }
        }
    }

    /// Not hour-aligned: raw edges, edge hours and whole days. 20 minutes past the hour, each
    /// edge is counted as its whole hour minus the reports outside the window (the shorter part
    /// of the hour); 49 minutes past, from the reports inside it.
    @Test(arguments: [1234.5, 2934.5])
    func windowEdgesAreFromInclusiveToExclusive(pastTheHour: Double) async throws {
        let p = try await makeProject()
        let from = utcMidnight(daysAgo: 5).addingTimeInterval(10 * 3600 + pastTheHour)
        let to = from.addingTimeInterval(3 * 86_400 + 777.25)
        let times: [(Date, Bool)] = [
            (from, true), (from.addingTimeInterval(-0.001), false), (to, false), (to.addingTimeInterval(-0.001), true),
            (TimeWindow.floor(from, 3600), false), (TimeWindow.ceil(to, 3600).addingTimeInterval(-0.001), false),
            (from.addingTimeInterval(1800), true), (from.addingTimeInterval(3 * 3600), true),
            (TimeWindow.ceil(from, 86_400).addingTimeInterval(5), true), (to.addingTimeInterval(-3600 * 5), true),
            (to.addingTimeInterval(60), false), (from.addingTimeInterval(-86_400), false),
        ]
        try await withApp { client in
            try await client.send(times.map { queryReport("edge", at: $0.0) }, key: p.ingestKey)
            let list = try await client.query(
                "/v1/projects/\(p.project)/crashes?from=\(q(from))&to=\(q(to))", token: p.readToken)
            let expected = times.filter(\.1).count
            #expect(list.json.groups.first?["count"] as? Int == expected)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let detail = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(id)?from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(detail.json["count"] as? Int == expected)
            let histogram = try #require(detail.json["histogram"] as? [[String: Any]])
            #expect(histogram.count == TimeWindow(from: from, to: to).buckets(3600).count)
            #expect(histogram.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == expected)
            #expect(histogram.first?["t"] as? String == RFC3339.format(TimeWindow.floor(from, 3600)))
            let stats = try await client.query(
                "/v1/projects/\(p.project)/stats?from=\(q(from))&to=\(q(to))&interval=day", token: p.readToken)
            let series = try #require(stats.json["series"] as? [[String: Any]])
            #expect(series.count == 1 && series[0]["key"] is NSNull)
            let points = try #require(series[0]["points"] as? [[String: Any]])
            #expect(points.count == 4)
            #expect(points.reduce(0) { $0 + ($1["count"] as? Int ?? 0) } == expected)
            // Exactly at `to` alone: empty window around one report.
            let at = try await client.query(
                "/v1/projects/\(p.project)/crashes?from=\(q(to))&to=\(q(to.addingTimeInterval(0.5)))", token: p.readToken)
            #expect(at.json.groups.first?["count"] as? Int == 1)
        }
    }

    @Test func paginationWalksEveryGroupOnceUnderConcurrentIngest() async throws {
        let p = try await makeProject()
        let base = Date().addingTimeInterval(-86_400)
        var initial: [TestReport] = []
        for g in 0..<40 {
            for r in 0..<(g % 7 + 1) {
                initial.append(queryReport("group \(Character(UnicodeScalar(65 + g)!))x", at: base.addingTimeInterval(Double(r))))
            }
        }
        let reports = initial
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            for sort in ["count", "lastSeen", "firstSeen"] {
                let writer = Task {
                    for round in 0..<8 {
                        let more =
                            (0..<40).map { g in
                                queryReport("group \(Character(UnicodeScalar(65 + g)!))x", at: Date().addingTimeInterval(-Double(round)))
                            } + [queryReport("new group \(sort) \(round)", at: Date())]
                        try await client.send(more.shuffled(), key: p.ingestKey)
                    }
                }
                let pages = try await client.walk("/v1/projects/\(p.project)/crashes?limit=3&sort=\(sort)", token: p.readToken) { page in
                    #expect(page.status == .ok, "\(page.json)")
                }
                let seen = pages.flatMap(\.groups).compactMap { $0["id"] as? String }
                try await writer.value
                #expect(Set(seen).count == seen.count, "\(sort): a group was listed twice: \(seen)")
                #expect(seen.count >= 40, "\(sort): \(seen.count) groups")
                let total = try await client.query("/v1/projects/\(p.project)/crashes?limit=200", token: p.readToken)
                let ids = Set(total.json.groups.compactMap { $0["id"] as? String })
                let originals = total.json.groups.filter { !($0["title"] as? String ?? "").hasPrefix("new") }.compactMap { $0["id"] as? String }
                #expect(Set(originals).isSubset(of: Set(seen)), "\(sort): an original group was skipped; saw \(seen.count)")
                #expect(Set(seen).isSubset(of: ids))
            }
        }
    }

    @Test func tokensOnlyOpenTheirProject() async throws {
        let a = try await makeProject()
        let b = try await makeProject()
        try await withApp { client in
            try await client.send([queryReport("secret", at: Date())], key: b.ingestKey)
            let list = try await client.query("/v1/projects/\(b.project)/crashes", token: b.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            for path in ["crashes", "crashes/\(id)", "crashes/\(id)/reports", "stats"] {
                #expect(try await client.query("/v1/projects/\(b.project)/\(path)", token: a.readToken).status == .notFound)
                #expect(try await client.query("/v1/projects/\(b.project)/\(path)", token: nil).status == .unauthorized)
                #expect(try await client.query("/v1/projects/\(b.project)/\(path)", token: "nope").status == .unauthorized)
                #expect(try await client.query("/v1/projects/\(b.project)/\(path)", token: b.ingestKey).status == .unauthorized)
            }
            // A's token, A's path, B's group id: 404.
            #expect(try await client.query("/v1/projects/\(a.project)/crashes/\(id)", token: a.readToken).status == .notFound)
            #expect(try await client.query("/v1/projects/\(a.project)/crashes/\(id)/reports", token: a.readToken).status == .notFound)
            #expect(
                try await client.query(
                    "/v1/projects/\(a.project)/crashes/\(id)", token: a.readToken, method: .patch, body: #"{"status":"ignored"}"#
                ).status == .notFound)
            #expect(try await client.query("/v1/projects/\(a.project)/crashes/abc", token: a.readToken).status == .notFound)
        }
    }

    @Test func triageRegressionAndIgnored() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await client.send([queryReport("fixme", at: now, version: "1.3.0"), queryReport("noise", at: now)], key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let fixme = try #require(list.json.groups.titled("fixme")?["id"] as? String)
            let noise = try #require(list.json.groups.titled("noise")?["id"] as? String)
            let path = "/v1/projects/\(p.project)/crashes/\(fixme)"

            let regressed = try await client.query(path, token: p.readToken, method: .patch, body: #"{"status":"regressed"}"#)
            #expect(regressed.status == .badRequest)
            #expect(regressed.json.error.contains("status"))
            #expect(try await client.query(path, token: p.readToken, method: .patch, body: #"{"status":"done"}"#).status == .badRequest)
            #expect(try await client.query(path, token: p.readToken, method: .patch, body: "nope").status == .badRequest)

            let resolved = try await client.query(
                path, token: p.readToken, method: .patch, body: #"{"status":"resolved","resolvedIn":"1.4.0"}"#)
            #expect(resolved.status == .ok)
            #expect(resolved.json["status"] as? String == "resolved")
            #expect(resolved.json["resolvedIn"] as? String == "1.4.0")
            #expect(resolved.json["count"] as? Int == 1)

            // Older version: stays resolved. A retried duplicate of a new version: never regresses.
            let old = queryReport("fixme", at: now, version: "1.3.9")
            try await client.send([old], key: p.ingestKey)
            #expect(try await client.query(path, token: p.readToken).json["status"] as? String == "resolved")
            try await client.send([queryReport("fixme", at: now, version: "1.10.0", id: UUID(uuidString: old["id"] as! String)!)], key: p.ingestKey)
            #expect(try await client.query(path, token: p.readToken).json["status"] as? String == "resolved")
            // 1.10.0 >= 1.4.0 numerically: regressed.
            try await client.send([queryReport("fixme", at: now, version: "1.10.0")], key: p.ingestKey)
            let after = try await client.query(path, token: p.readToken)
            #expect(after.json["status"] as? String == "regressed")
            #expect(after.json["count"] as? Int == 3)

            // Resolved without a version: any new report regresses.
            _ = try await client.query(path, token: p.readToken, method: .patch, body: #"{"status":"resolved"}"#)
            try await client.send([queryReport("fixme", at: now, version: "0.1")], key: p.ingestKey)
            #expect(try await client.query(path, token: p.readToken).json["status"] as? String == "regressed")

            // Ignored: hidden by default, shown with status=ignored, keeps counting, stays ignored.
            let ignored = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(noise)", token: p.readToken, method: .patch, body: #"{"status":"ignored"}"#)
            #expect(ignored.json["status"] as? String == "ignored")
            try await client.send([queryReport("noise", at: now)], key: p.ingestKey)
            let visible = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            #expect(visible.json.groups.titles == ["fixme"])
            let hidden = try await client.query("/v1/projects/\(p.project)/crashes?status=ignored", token: p.readToken)
            #expect(hidden.json.groups.titles == ["noise"])
            #expect(hidden.json.groups.first?["count"] as? Int == 2)
            #expect(hidden.json.groups.first?["status"] as? String == "ignored")
            let regressedOnly = try await client.query("/v1/projects/\(p.project)/crashes?status=regressed", token: p.readToken)
            #expect(regressedOnly.json.groups.titles == ["fixme"])
            let reopened = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(noise)", token: p.readToken, method: .patch, body: #"{"status":"open"}"#)
            #expect(reopened.json["status"] as? String == "open")
            #expect(reopened.json["resolvedIn"] is NSNull)
        }
    }

    @Test func detailAndReports() async throws {
        let p = try await makeProject()
        let start = TimeWindow.floor(Date(), 3600).addingTimeInterval(-10 * 3600)
        var built: [TestReport] = []
        for i in 0..<7 {
            built.append(
                queryReport(
                    "detail", at: start.addingTimeInterval(Double(i) * 3600 + 60), version: i < 4 ? "2.0" : "2.1",
                    os: i == 0 ? nil : "iOS", model: i % 2 == 0 ? "iPhone15,3" : "iPad13,1", device: "d\(i % 3)",
                    stack: ["0 Demo 0x1 main + 1"], context: ["screen": "home"]))
        }
        let reports = built
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            let from = start, to = start.addingTimeInterval(12 * 3600)
            let detail = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(id)?from=\(q(from))&to=\(q(to))", token: p.readToken)
            #expect(detail.status == .ok)
            #expect(detail.json["count"] as? Int == 7)
            #expect(detail.json["devices"] as? Int == 3)
            let breakdown = try #require(detail.json["breakdown"] as? [String: [[String: Any]]])
            #expect(breakdown["versions"]?.map { "\($0["value"]!)=\($0["count"]!)" } == ["2.0=4", "2.1=3"])
            #expect(breakdown["os"]?.map { "\($0["value"]!)=\($0["count"]!)" } == ["iOS=6"])
            #expect(breakdown["models"]?.map { "\($0["value"]!)=\($0["count"]!)" } == ["iPhone15,3=4", "iPad13,1=3"])
            let histogram = try #require(detail.json["histogram"] as? [[String: Any]])
            #expect(histogram.map { $0["count"] as? Int ?? -1 } == [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
            let latest = try #require(detail.json["latest"] as? [[String: Any]])
            #expect(latest.count == 5)
            #expect(latest.first?["timestamp"] as? String == RFC3339.format(start.addingTimeInterval(6 * 3600 + 60)))
            #expect(latest.allSatisfy { $0["stack"] == nil && $0["receivedAt"] is String })
            #expect((latest.first?["context"] as? [String: String]) == ["screen": "home"])

            let pages = try await client.walk("/v1/projects/\(p.project)/crashes/\(id)/reports?limit=3", token: p.readToken) { page in
                #expect(page.status == .ok)
            }
            let walked = pages.flatMap { $0["reports"] as? [[String: Any]] ?? [] }
            #expect(walked.compactMap { $0["id"] as? String } == reports.reversed().compactMap { $0["id"] as? String })
            let first = try #require(walked.last)
            #expect(first["stack"] as? [String] == ["0 Demo 0x1 main + 1"])
            #expect((first["app"] as? [String: String]) == ["id": "com.example.demo", "version": "2.0"])
            #expect((first["device"] as? [String: String]) == ["model": "iPhone15,3", "id": "d0"])
            #expect(first["kind"] as? String == "custom" && first["reason"] as? String == "detail")
            #expect(first["receivedAt"] is String)
        }
    }

    /// Reports of the same microsecond list in id order, newest time first, and a cursor that
    /// falls among them resumes after the one it names: `reports_group_ts` orders by time only,
    /// the ties are sorted by id on top of it.
    @Test func reportsOfOneMicrosecondListInIdOrderAcrossPages() async throws {
        let p = try await makeProject()
        let at = TimeWindow.floor(Date(), 3600).addingTimeInterval(-2 * 3600 + 0.123456)
        let times = [at.addingTimeInterval(-1)] + Array(repeating: at, count: 7) + [at.addingTimeInterval(1)]
        let reports = times.map { queryReport("ties", at: $0) }
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            for limit in [2, 3] {
                let pages = try await client.walk("/v1/projects/\(p.project)/crashes/\(id)/reports?limit=\(limit)", token: p.readToken) { page in
                    #expect(page.status == .ok)
                }
                let walked = pages.flatMap { $0["reports"] as? [[String: Any]] ?? [] }.compactMap { $0["id"] as? String }
                let tied = reports[1...7].compactMap { $0["id"] as? String }.sorted(by: >)
                let expected = [reports[8]["id"] as? String].compactMap { $0 } + tied + [reports[0]["id"] as? String].compactMap { $0 }
                #expect(walked == expected, "limit \(limit)")
            }
        }
    }

    /// Fractional times come back as they were sent, to the microsecond, in the reports, the
    /// detail and the list. (PostgresNIO's own `Date` binding truncates: `.995Z` was stored as
    /// `.994999` and answered so, for about a third of the millisecond values.)
    @Test func fractionalTimesComeBackAsSent() async throws {
        let p = try await makeProject()
        let second = String(RFC3339.format(utcMidnight(daysAgo: 2).addingTimeInterval(3600)).dropLast())  // "…T01:00:00"
        let fractions = (0..<1000).map { ".\(String($0 + 1000).dropFirst())" } + [".000001", ".999999", ".123456", ".5"]
        let sent = fractions.map { second + $0 + "Z" }
        // What the API prints: the fraction without its trailing zeros, none when it is zero.
        @Sendable func shown(_ fraction: String) -> String {
            var f = fraction
            while f.hasSuffix("0") { f.removeLast() }
            return second + (f == "." ? "" : f) + "Z"
        }
        let reports = sent.map { text in
            var object = queryReport("fractions", at: Date()).object
            object["timestamp"] = text
            return TestReport(object: object)
        }
        try await withApp { client in
            try await client.send(Array(reports[..<1000]), key: p.ingestKey)
            try await client.send(Array(reports[1000...]), key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let group = try #require(list.json.groups.first)
            #expect(group["firstSeen"] as? String == shown(".000"))
            #expect(group["lastSeen"] as? String == shown(".999999"))
            let id = try #require(group["id"] as? String)
            let pages = try await client.walk("/v1/projects/\(p.project)/crashes/\(id)/reports?limit=200", token: p.readToken) { page in
                #expect(page.status == .ok)
            }
            let answered = pages.flatMap { $0["reports"] as? [[String: Any]] ?? [] }.compactMap { $0["timestamp"] as? String }
            #expect(answered.count == sent.count)
            let wrong = Set(fractions.map(shown)).symmetricDifference(answered)
            #expect(wrong.count == 0, "sent and answered differ: \(wrong.sorted().prefix(6))")
            let detail = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
            let latest = try #require(detail.json["latest"] as? [[String: Any]])
            #expect(latest.first?["timestamp"] as? String == shown(".999999"))
        }
    }

    @Test func statsSeriesAreZeroFilled() async throws {
        let p = try await makeProject()
        let day0 = utcMidnight(daysAgo: 4)
        let reports = [
            queryReport("s1", at: day0.addingTimeInterval(3600), kind: "kvo", version: "1.2"),
            queryReport("s1", at: day0.addingTimeInterval(3700), kind: "kvo", version: "1.10"),
            queryReport("s2", at: day0.addingTimeInterval(86_400 * 2 + 5), kind: "timer", version: "1.10"),
        ]
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let base = "/v1/projects/\(p.project)/stats?from=\(q(day0))&to=\(q(day0.addingTimeInterval(3 * 86_400)))"
            let none = try await client.query(base + "&interval=day", token: p.readToken)
            let series = try #require(none.json["series"] as? [[String: Any]])
            #expect(series.count == 1)
            #expect((series[0]["points"] as? [[String: Any]])?.map { $0["count"] as? Int ?? -1 } == [2, 0, 1])
            let kinds = try await client.query(base + "&interval=day&groupBy=kind", token: p.readToken)
            let byKind = try #require(kinds.json["series"] as? [[String: Any]])
            #expect(byKind.map { $0["key"] as? String } == ["kvo", "timer"])
            #expect((byKind[1]["points"] as? [[String: Any]])?.map { $0["count"] as? Int ?? -1 } == [0, 0, 1])
            let versions = try await client.query(base + "&interval=day&groupBy=version", token: p.readToken)
            #expect((versions.json["series"] as? [[String: Any]])?.map { $0["key"] as? String } == ["1.10", "1.2"])
            let hourly = try await client.query(base + "&interval=hour", token: p.readToken)
            let points = try #require(((hourly.json["series"] as? [[String: Any]])?.first?["points"]) as? [[String: Any]])
            #expect(points.count == 72)
            #expect(points[1]["count"] as? Int == 2 && points[1]["t"] as? String == RFC3339.format(day0.addingTimeInterval(3600)))
            let empty = try await client.query(base + "&groupBy=kind&from=\(q(day0.addingTimeInterval(-86_400)))&to=\(q(day0))", token: p.readToken)
            #expect((empty.json["series"] as? [Any])?.isEmpty == true)
        }
    }

    @Test func badParametersAreNamed() async throws {
        let p = try await makeProject()
        try await withApp { client in
            try await client.send([queryReport("x", at: Date())], key: p.ingestKey)
            let list = "/v1/projects/\(p.project)/crashes"
            let cases: [(String, String)] = [
                (list + "?limit=0", "limit"), (list + "?limit=201", "limit"), (list + "?limit=ten", "limit"),
                (list + "?sort=newest", "sort"), (list + "?from=yesterday", "from"), (list + "?to=2026-13-01T00:00:00Z", "to"),
                (list + "?from=\(q(Date()))&to=\(q(Date().addingTimeInterval(-60)))", "from"), (list + "?kind=segfault", "kind"),
                // `from` alone ends at the default `to` (the end of the current hour): past it, after its `to`.
                (list + "?from=\(q(Date().addingTimeInterval(2 * 3600)))", "from"),
                ("/v1/projects/\(p.project)/stats?from=\(q(Date().addingTimeInterval(2 * 3600)))", "from"),
                (list + "?status=closed", "status"), (list + "?cursor=garbage", "cursor"),
                ("/v1/projects/\(p.project)/stats?interval=week", "interval"),
                ("/v1/projects/\(p.project)/stats?groupBy=os", "groupBy"),
            ]
            for (uri, name) in cases {
                let response = try await client.query(uri, token: p.readToken)
                #expect(response.status == .badRequest, "\(uri)")
                #expect(response.json.error.hasPrefix(name), "\(uri): \(response.json.error)")
            }
            // A cursor of another sort is not accepted either.
            let page = try await client.query(list + "?limit=1&sort=lastSeen", token: p.readToken)
            #expect(page.json["nextCursor"] is NSNull)
        }
    }
}
