import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// triage.md's merge and unmerge against the real database, through the REST routes: the
/// target counts the source's past and future reports (as a recount of the raw reports says),
/// chains stay one level deep, cycles are refused, an unmerge gives everything back.
@Suite struct MergeTests {
    private typealias Answer = (status: HTTPResponse.Status, json: [String: Any])

    private func post(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ path: String, _ body: String) async throws -> Answer {
        try await client.query("/v1/projects/\(p.project)/crashes/\(path)", token: p.readToken, method: .post, body: body)
    }

    private func merge(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ source: String, into: String) async throws -> Answer {
        try await post(client, p, "\(source)/merge", #"{"into": "\#(into)"}"#)
    }

    private func detail(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ id: String) async throws -> [String: Any] {
        let answer = try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken)
        #expect(answer.status == .ok)
        return answer.json
    }

    private func list(_ client: some TestClientProtocol, _ p: ProjectCredentials) async throws -> [[String: Any]] {
        try await client.query("/v1/projects/\(p.project)/crashes?limit=100", token: p.readToken).json.groups
    }

    /// Reports and distinct devices of `groups` in the last 7 days, counted from raw reports.
    private func recount(_ groups: [String]) async throws -> (reports: Int64, devices: Int64) {
        let ids = groups.compactMap { Int64($0) }
        let from = Date().addingTimeInterval(-7 * 86_400 + 600)
        return try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT count(*)::bigint, count(DISTINCT NULLIF(device_id, ''))::bigint FROM reports
                WHERE group_id = ANY(\(ids)) AND ts >= \(from)
                """, logger: TestEnvironment.logger)
            for try await (n, d) in rows.decode((Int64, Int64).self) { return (n, d) }
            return (0, 0)
        }
    }

    @Test func theTargetCountsPastAndFutureReportsAndUnmergeGivesThemBack() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let now = Date()
            try await client.send(
                [
                    queryReport("merge-a", at: now.addingTimeInterval(-3 * 86_400), version: "2.0.0", device: "d1", fatal: true),
                    queryReport("merge-a", at: now.addingTimeInterval(-120), device: "d1"),
                    queryReport("merge-a", at: now.addingTimeInterval(-60), device: "d2"),
                    queryReport("merge-b", at: now.addingTimeInterval(-2 * 86_400), device: "d3"),
                    queryReport("merge-b", at: now.addingTimeInterval(-30), device: "d3"),
                ], key: p.ingestKey)
            let groups = try await list(client, p)
            let a = try #require(groups.titled("merge-a")?["id"] as? String)
            let b = try #require(groups.titled("merge-b")?["id"] as? String)

            let merged = try await merge(client, p, a, into: b)
            #expect(merged.status == .ok)
            #expect(merged.json["id"] as? String == b && merged.json["count"] as? Int == 5)
            #expect(merged.json["merged"] as? [String] == [a] && merged.json["mergedInto"] is NSNull)
            #expect(merged.json["fatal"] as? Bool == true && merged.json["title"] as? String == "merge-b")
            #expect(Set(merged.json["versions"] as? [String] ?? []) == ["1.0.0", "2.0.0"])
            let expected = try await recount([a, b])
            #expect(expected.reports == 5 && expected.devices == 3)

            // The list shows the target with the source's reports; the source is not listed.
            var shown = try await list(client, p)
            #expect(shown.titles == ["merge-b"])
            #expect(shown.titled("merge-b")?["count"] as? Int == 5 && shown.titled("merge-b")?["devices"] as? Int == 3)
            #expect(try await client.query("/v1/projects/\(p.project)/crashes?q=merge", token: p.readToken).json.groups.titles == ["merge-b"])

            // The target's detail and reports hold both groups' reports.
            let target = try await detail(client, p, b)
            let histogram = target["histogram"] as? [[String: Any]] ?? []
            #expect(histogram.compactMap { $0["count"] as? Int }.reduce(0, +) == 5)
            #expect(target["count"] as? Int == 5)
            #expect((target["latest"] as? [[String: Any]])?.first?["reason"] as? String == "merge-b")
            let versions = ((target["breakdown"] as? [String: Any])?["versions"] as? [[String: Any]]) ?? []
            #expect(versions.first { $0["value"] as? String == "2.0.0" }?["count"] as? Int == 1)
            let reports = try await client.query("/v1/projects/\(p.project)/crashes/\(b)/reports?limit=100", token: p.readToken)
            #expect(
                (reports.json["reports"] as? [[String: Any]])?.compactMap { $0["reason"] as? String }.sorted()
                    == ["merge-a", "merge-a", "merge-a", "merge-b", "merge-b"])

            // The source answers with its own figures and where it went.
            let source = try await detail(client, p, a)
            #expect(source["mergedInto"] as? String == b)
            #expect(source["count"] as? Int == 3)

            // A future report with the source's signature counts in the target and regresses it.
            let resolved = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(b)", token: p.readToken, method: .patch,
                body: #"{"status": "resolved", "resolvedIn": "2.0.0"}"#)
            #expect(resolved.json["status"] as? String == "resolved")
            try await client.send([queryReport("merge-a", at: Date().addingTimeInterval(-5), version: "2.0.0", device: "d4")], key: p.ingestKey)
            shown = try await list(client, p)
            #expect(shown.titles == ["merge-b"])
            #expect(shown.titled("merge-b")?["count"] as? Int == 6 && shown.titled("merge-b")?["status"] as? String == "regressed")
            #expect(try await recount([a, b]).reports == 6)
            let activity = try await client.query("/v1/projects/\(p.project)/crashes/\(b)/activity", token: p.readToken)
            let types = (activity.json["activity"] as? [[String: Any]] ?? []).compactMap { $0["type"] as? String }
            #expect(types == ["regressed", "resolved", "merged", "created"])
            let sourceActivity = try await client.query("/v1/projects/\(p.project)/crashes/\(a)/activity", token: p.readToken)
            let entry = (sourceActivity.json["activity"] as? [[String: Any]])?.first
            #expect(entry?["type"] as? String == "merged" && entry?["data"] as? [String: String] == ["group": a, "into": b])

            // Unmerge: the source is listed again with all of its reports, the target with its own.
            let unmerged = try await post(client, p, "\(b)/unmerge", #"{"group": "\#(a)"}"#)
            #expect(unmerged.status == .ok && unmerged.json["count"] as? Int == 2 && unmerged.json["merged"] as? [String] == [])
            shown = try await list(client, p)
            #expect(Set(shown.titles) == ["merge-a", "merge-b"])
            #expect(shown.titled("merge-a")?["count"] as? Int == 4 && shown.titled("merge-a")?["mergedInto"] is NSNull)
            #expect(shown.titled("merge-a")?["status"] as? String == "open")
            // Again: not merged any more.
            let again = try await post(client, p, "\(b)/unmerge", #"{"group": "\#(a)"}"#)
            #expect(again.status == .badRequest && again.json.error.hasPrefix("group:"))
        }
    }

    @Test func chainsStayOneLevelDeepAndCyclesAreRefused() async throws {
        let p = try await makeProject()
        let other = try await makeProject()
        try await withApp { client in
            let at = Date().addingTimeInterval(-60)
            try await client.send(["chain-a", "chain-b", "chain-c", "chain-d"].map { queryReport($0, at: at) }, key: p.ingestKey)
            try await client.send([queryReport("elsewhere", at: at)], key: other.ingestKey)
            let groups = try await list(client, p)
            let (a, b, c, d) = try (
                #require(groups.titled("chain-a")?["id"] as? String), #require(groups.titled("chain-b")?["id"] as? String),
                #require(groups.titled("chain-c")?["id"] as? String), #require(groups.titled("chain-d")?["id"] as? String)
            )
            let foreign = try #require(try await list(client, other).titled("elsewhere")?["id"] as? String)

            // Bodies and targets that are refused change nothing.
            for (body, status, field) in [
                ("{}", HTTPResponse.Status.badRequest, "into:"), (#"{"into": 5}"#, .badRequest, "into:"),
                ("[]", .badRequest, "into:"), (#"{"into": "\#(a)"}"#, .badRequest, "into:"),
                (#"{"into": "\#(foreign)"}"#, .notFound, ""), (#"{"into": "999999999"}"#, .notFound, ""),
            ] {
                let answer = try await post(client, p, "\(a)/merge", body)
                #expect(answer.status == status, "\(body)")
                #expect(answer.json.error.hasPrefix(field), "\(body): \(answer.json)")
            }
            let foreignToken = try await client.query(
                "/v1/projects/\(p.project)/crashes/\(a)/merge", token: other.readToken, method: .post, body: #"{"into": "\#(b)"}"#)
            #expect(foreignToken.status == .notFound)
            #expect(try await list(client, p).count == 4)

            #expect(try await merge(client, p, a, into: b).json["merged"] as? [String] == [a])
            // Into a merged group: into its target.
            let chained = try await merge(client, p, c, into: a)
            #expect(chained.status == .ok && chained.json["id"] as? String == b)
            #expect(Set(chained.json["merged"] as? [String] ?? []) == [a, c] && chained.json["count"] as? Int == 3)
            // A cycle, and a source that is itself merged.
            let cycle = try await merge(client, p, b, into: a)
            #expect(cycle.status == .badRequest && cycle.json.error.hasPrefix("into:"))
            let mergedSource = try await merge(client, p, a, into: d)
            #expect(mergedSource.status == .badRequest)
            // Merging a target moves its members along.
            let moved = try await merge(client, p, b, into: d)
            #expect(moved.status == .ok && moved.json["id"] as? String == d && moved.json["count"] as? Int == 4)
            #expect(moved.json["merged"] as? [String] == [a, b, c].sorted { Int64($0)! < Int64($1)! })
            for id in [a, b, c] {
                #expect(try await detail(client, p, id)["mergedInto"] as? String == d)
            }
            #expect(try await list(client, p).titles == ["chain-d"])
            #expect(try await recount([a, b, c, d]).reports == 4)

            // Unmerging b gives back b's own reports only: a and c stay in d.
            let unmerged = try await post(client, p, "\(d)/unmerge", #"{"group": "\#(b)"}"#)
            #expect(unmerged.status == .ok && unmerged.json["count"] as? Int == 3)
            #expect(Set(try await list(client, p).titles) == ["chain-b", "chain-d"])
            let wrong = try await post(client, p, "\(b)/unmerge", #"{"group": "\#(a)"}"#)
            #expect(wrong.status == .badRequest && wrong.json.error.hasPrefix("group:"))
            #expect(try await post(client, p, "\(d)/unmerge", "{}").json.error.hasPrefix("group:"))
            #expect(try await post(client, p, "999999999/unmerge", #"{"group": "\#(a)"}"#).status == .notFound)
        }
    }

    /// A time-sorted walk lists every group once (contract, "Cursors") when a merged member
    /// gets a report between pages: the report moves its target's key, and the walk keeps the
    /// target at its key as of the first page (an earlier `firstSeen` showed it twice, a later
    /// `lastSeen` never).
    @Test func aWalkListsATargetOnceWhenItsMemberGetsAReportBetweenPages() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let now = Date()
            func ago(_ seconds: Double) -> Date { now.addingTimeInterval(-seconds) }
            try await client.send(
                [
                    queryReport("walk-x", at: ago(60)), queryReport("walk-y", at: ago(2 * 3600)),
                    queryReport("walk-t", at: ago(3 * 3600)), queryReport("walk-m", at: ago(3.5 * 3600)),
                    queryReport("walk-z", at: ago(5 * 3600)),
                ], key: p.ingestKey)
            let groups = try await list(client, p)
            let t = try #require(groups.titled("walk-t")?["id"] as? String)
            let m = try #require(groups.titled("walk-m")?["id"] as? String)
            #expect(try await merge(client, p, m, into: t).status == .ok)

            // firstSeen: x, y, t (3.5 h), z; after t is shown, m gets a report older than z's.
            // lastSeen: x, y, t (3 h), z; after x is shown, m gets the newest report.
            for (sort, after, report) in [
                ("firstSeen", "walk-t", queryReport("walk-m", at: ago(6 * 3600))), ("lastSeen", "walk-x", queryReport("walk-m", at: ago(10))),
            ] {
                var seen: [String] = []
                var cursor: String?
                var sent = false
                repeat {
                    let page = try await client.query(
                        "/v1/projects/\(p.project)/crashes?limit=1&sort=\(sort)" + (cursor.map { "&cursor=\($0)" } ?? ""), token: p.readToken)
                    try #require(page.status == .ok, "\(sort): \(page.json)")
                    seen += page.json.groups.titles
                    if !sent, seen.last == after {
                        try await client.send([report], key: p.ingestKey)
                        sent = true
                    }
                    cursor = page.json["nextCursor"] as? String
                } while cursor != nil && seen.count < 10
                #expect(sent, "\(sort)")
                #expect(seen == ["walk-x", "walk-y", "walk-t", "walk-z"], "\(sort): \(seen)")
            }
        }
    }

    /// A release's `topGroups` and `newGroups` show a merge as the crashes list does: the target
    /// counts its members' reports of the version, a member is never listed, and the target is
    /// new in the version of the earliest report of it and its members.
    @Test func aReleaseCountsMergedGroupsInTheirTarget() async throws {
        let p = try await makeProject()
        try await withApp { client in
            let now = Date()
            func ago(_ seconds: Double) -> Date { now.addingTimeInterval(-seconds) }
            try await client.send(
                [
                    queryReport("rel-member", at: ago(3 * 3600), version: "1.0.0"),
                    queryReport("rel-member", at: ago(1200), version: "2.0.0"), queryReport("rel-member", at: ago(1100), version: "2.0.0"),
                    queryReport("rel-target", at: ago(3600), version: "2.0.0"),
                    queryReport("rel-other", at: ago(2400), version: "2.0.0"), queryReport("rel-other", at: ago(2300), version: "2.0.0"),
                ], key: p.ingestKey)
            let groups = try await list(client, p)
            let target = try #require(groups.titled("rel-target")?["id"] as? String)
            let member = try #require(groups.titled("rel-member")?["id"] as? String)
            #expect(try await merge(client, p, member, into: target).status == .ok)

            func release(_ version: String) async throws -> (top: [String], new: [String]) {
                let answer = try await client.query("/v1/projects/\(p.project)/releases/\(version)", token: p.readToken)
                try #require(answer.status == .ok, "\(answer.json)")
                func rows(_ key: String) -> [String] {
                    ((answer.json[key] as? [[String: Any]]) ?? []).map { "\($0["title"] as? String ?? "?") \($0["count"] as? Int ?? -1)" }
                }
                return (rows("topGroups"), rows("newGroups"))
            }
            // 2.0.0: the target with its member's two reports; the target is not new there, since
            // its member's first report was of 1.0.0.
            let two = try await release("2.0.0")
            #expect(two.top == ["rel-target 3", "rel-other 2"])
            #expect(two.new == ["rel-other 2"])
            // 1.0.0 introduced the merged group (through its member).
            let one = try await release("1.0.0")
            #expect(one.top == ["rel-target 1"])
            #expect(one.new == ["rel-target 1"])
        }
    }
}
