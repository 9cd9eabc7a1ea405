import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Cursors (contract, "Precise readings: Cursors"): small and accepted back whatever the
/// cluster's load, 400 for every forged one, and no way around the window checks.
@Suite struct CursorTests {
    /// 20 transactions open in the cluster made `pg_current_snapshot()` (which the cursor
    /// used to carry) longer than the server's own 256-byte parameter limit.
    @Test func cursorStaysSmallWhileManyTransactionsAreOpen() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await client.send((0..<6).map { queryReport("small " + String(repeating: "y", count: $0 + 1), at: now) }, key: p.ingestKey)
            try await withOpenTransactions(20) {
                for sort in ["count", "lastSeen", "firstSeen"] {
                    let pages = try await client.walk("/v1/projects/\(p.project)/crashes?limit=2&sort=\(sort)", token: p.readToken) { page in
                        try #require(page.status == .ok, "\(sort): \(page.json)")
                        if let cursor = page.json["nextCursor"] as? String {
                            #expect(cursor.utf8.count <= 160, "\(sort): \(cursor.utf8.count) bytes")
                        }
                    }
                    let seen = pages.flatMap(\.groups).compactMap { $0["id"] as? String }
                    #expect(seen.count == 6 && Set(seen).count == 6, "\(sort): \(seen)")
                }
            }
        }
    }

    /// Every kind of forged or damaged cursor is a 400 naming `cursor`.
    @Test func forgedCursorsAreBadRequests() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await client.send((0..<3).map { queryReport("forged " + String(repeating: "z", count: $0 + 1), at: now) }, key: p.ingestKey)
            let first = try await client.query("/v1/projects/\(p.project)/crashes?limit=1&sort=lastSeen", token: p.readToken)
            let genuine = try #require(first.json["nextCursor"] as? String)
            let id = try #require(first.json.groups.first?["id"] as? String)
            let project = try await projectID(p.project)
            let decoded = try ListCursor.decode(genuine, order: .lastSeen, project: project)
            let from = ListCursor.micros(now.addingTimeInterval(-86_400)), to = ListCursor.micros(now.addingTimeInterval(3600))
            func forged(_ json: String) -> String {
                Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            }
            let year = Int64(365 * 86_400) * 1_000_000
            let cases: [(String, String)] = [
                ("lastSeen", "%%%"),
                ("lastSeen", "not-a-cursor"),
                ("lastSeen", String(genuine.dropLast(3))),
                ("lastSeen", genuine + "é"),
                ("count", genuine),  // another sort's cursor
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":"١٢","i":1,"f":\#(from),"t":\#(to)}"#)),  // non-ASCII digits
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":\#(from),"t":\#(to),"n":"12:10:"}"#)),  // the old snapshot text
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":9223372036854775807,"i":1,"f":\#(from),"t":\#(to)}"#)),  // time out of range
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":-9223372036854775808,"i":1,"f":\#(from),"t":\#(to)}"#)),
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":\#(to),"t":\#(from)}"#)),  // from after to
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":\#(to - 401 * 86_400_000_000),"t":\#(to)}"#)),  // over 400 days
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":\#(Int64.max),"t":\#(Int64.max)}"#)),
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":-\#(10_000 * year),"t":-\#(10_000 * year)}"#)),
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1}"#)),  // no window
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":0,"f":\#(from),"t":\#(to)}"#)),  // group id 0
                ("lastSeen", forged(#"{"s":"l","p":\#(project),"k":1,"i":1,"f":\#(from),"t":\#(to),"n":-4}"#)),  // snapshot id
                ("count", forged(#"{"s":"c","p":\#(project),"k":-1,"i":1,"f":\#(from),"t":\#(to)}"#)),  // negative count
                ("count", forged(#"{"s":"c","p":\#(project),"k":1.5,"i":1,"f":\#(from),"t":\#(to)}"#)),
                ("count", forged(#"{"s":"c","p":\#(project),"k":1,"i":1e30,"f":\#(from),"t":\#(to)}"#)),
                ("count", forged(#"[1,2,3]"#)),
            ]
            for (sort, cursor) in cases {
                let page = try await client.query(
                    "/v1/projects/\(p.project)/crashes?sort=\(sort)&cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")",
                    token: p.readToken)
                #expect(page.status == .badRequest, "\(sort) \(cursor): \(page.status) \(page.json)")
                #expect(page.json.error.hasPrefix("cursor"), "\(cursor): \(page.json)")
            }
            // Reports lists: another group's cursor, a list cursor, an out-of-range time.
            let reportCases = [
                genuine,
                ListCursor(order: .reports, project: project, key: 1, groupID: decoded.groupID + 1, reportID: UUID()).encode(),
                ListCursor(order: .reports, project: project, key: Int64.max, groupID: Int64(id)!, reportID: UUID()).encode(),
                forged(#"{"s":"r","p":\#(project),"k":1,"i":\#(id),"u":"not-a-uuid"}"#),
                forged(#"{"s":"r","p":\#(project),"k":1,"i":\#(id)}"#),
            ]
            for cursor in reportCases {
                let page = try await client.query(
                    "/v1/projects/\(p.project)/crashes/\(id)/reports?cursor=\(cursor)", token: p.readToken)
                #expect(page.status == .badRequest, "\(cursor): \(page.status) \(page.json)")
            }
            // The genuine cursor still works.
            #expect(
                try await client.query(
                    "/v1/projects/\(p.project)/crashes?limit=1&sort=lastSeen&cursor=\(genuine)", token: p.readToken
                ).status == .ok)
        }
    }

    /// Hardening, "Bounded queries": a cursor is bound to the project and the list that issued
    /// it. Another project's `nextCursor` on this project's list, a list cursor on a reports
    /// list and the other way round, and a cursor without a project are 400s naming `cursor`.
    @Test func cursorOfAnotherProjectOrListIsRefused() async throws {
        let a = try await makeProject(), b = try await makeProject()
        let now = Date()
        try await withApp { client in
            for p in [a, b] {
                let reasons = ["bound x", "bound x", "bound y", "bound z"]
                try await client.send(reasons.map { queryReport($0, at: now) }, key: p.ingestKey)
            }
            for sort in ["count", "lastSeen", "firstSeen"] {
                let page = try await client.query("/v1/projects/\(b.project)/crashes?limit=1&sort=\(sort)", token: b.readToken)
                let cursor = try #require(page.json["nextCursor"] as? String)
                let elsewhere = try await client.query(
                    "/v1/projects/\(a.project)/crashes?limit=1&sort=\(sort)&cursor=\(cursor)", token: a.readToken)
                #expect(elsewhere.status == .badRequest, "\(sort): \(elsewhere.json)")
                #expect(elsewhere.json.error.hasPrefix("cursor"), "\(sort): \(elsewhere.json)")
                let own = try await client.query(
                    "/v1/projects/\(b.project)/crashes?limit=1&sort=\(sort)&cursor=\(cursor)", token: b.readToken)
                #expect(own.status == .ok, "\(sort): \(own.json)")
            }
            // Lists and reports lists do not take each other's cursors.
            let list = try await client.query("/v1/projects/\(a.project)/crashes?limit=1", token: a.readToken)
            let listCursor = try #require(list.json["nextCursor"] as? String)
            let group = try #require(list.json.groups.first?["id"] as? String)
            let reports = try await client.query("/v1/projects/\(a.project)/crashes/\(group)/reports?limit=1", token: a.readToken)
            let reportsCursor = try #require(reports.json["nextCursor"] as? String)
            let crossed = [
                "/v1/projects/\(a.project)/crashes/\(group)/reports?limit=1&cursor=\(listCursor)",
                "/v1/projects/\(a.project)/crashes?limit=1&cursor=\(reportsCursor)",
            ]
            for uri in crossed {
                let answer = try await client.query(uri, token: a.readToken)
                #expect(answer.status == .badRequest, "\(uri): \(answer.json)")
                #expect(answer.json.error.hasPrefix("cursor"), "\(uri): \(answer.json)")
            }
            #expect(
                try await client.query(
                    "/v1/projects/\(a.project)/crashes/\(group)/reports?limit=1&cursor=\(reportsCursor)", token: a.readToken
                ).status == .ok)
            // The same cursor without its project (as cursors were before they were bound).
            var fields = try #require(
                try JSONSerialization.jsonObject(with: Self.base64URLDecoded(listCursor)) as? [String: Any])
            #expect(fields["p"] != nil)
            fields["p"] = nil
            let unbound = Self.base64URL(try JSONSerialization.data(withJSONObject: fields))
            let answer = try await client.query("/v1/projects/\(a.project)/crashes?limit=1&cursor=\(unbound)", token: a.readToken)
            #expect(answer.status == .badRequest, "\(answer.json)")
            #expect(answer.json.error.hasPrefix("cursor"), "\(answer.json)")
        }
    }

    private static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func base64URLDecoded(_ text: String) -> Data {
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        return Data(base64Encoded: b64) ?? Data()
    }

    /// A cursor whose stored snapshot was pruned is still accepted: the walk goes on over
    /// current data.
    @Test func cursorOfAPrunedSnapshotIsAccepted() async throws {
        let p = try await makeProject()
        let now = Date()
        try await withApp { client in
            try await client.send((0..<3).map { queryReport("pruned " + String(repeating: "w", count: $0 + 1), at: now) }, key: p.ingestKey)
            let first = try await client.query("/v1/projects/\(p.project)/crashes?limit=1", token: p.readToken)
            let cursor = try #require(first.json["nextCursor"] as? String)
            let snapshot = try #require(try ListCursor.decode(cursor, order: .count, project: try await projectID(p.project)).snapshot)
            try await withTestDatabase { db in
                _ = try await db.client.query("DELETE FROM list_snapshots WHERE id = \(snapshot)", logger: TestEnvironment.logger)
            }
            let second = try await client.query("/v1/projects/\(p.project)/crashes?limit=1&cursor=\(cursor)", token: p.readToken)
            #expect(second.status == .ok)
            #expect(second.json.groups.count == 1)
            #expect(second.json.groups.first?["id"] as? String != first.json.groups.first?["id"] as? String)
        }
    }

    @Test func pruningDeletesOnlyOldSnapshots() async throws {
        try await withTestDatabase { db in
            let store = PostgresQueryStore(database: db)
            let old = try await store.saveListSnapshot("10:10:")
            let fresh = try await store.saveListSnapshot("10:20:12,15")
            _ = try await db.client.query(
                "UPDATE list_snapshots SET created_at = now() - interval '2 days' WHERE id = \(old)", logger: TestEnvironment.logger)
            _ = try await store.pruneListSnapshots(before: Date().addingTimeInterval(-86_400))
            let (gone, kept) = try await db.client.withConnection { connection in
                let reader = PostgresQueryStore.Reader(database: db, connection: connection)
                return (try await reader.listSnapshot(old), try await reader.listSnapshot(fresh))
            }
            #expect(gone == nil)
            #expect(kept == "10:20:12,15")
        }
    }
}

/// Holds `count` transactions open in the test cluster (each with a transaction id, so
/// each is in every snapshot taken meanwhile) while `body` runs.
func withOpenTransactions<T: Sendable>(_ count: Int, _ body: @Sendable () async throws -> T) async throws -> T {
    let config = TestEnvironment.configuration { $0.databasePoolSize = count }
    let opened = Counter(), done = Counter()
    return try await withDatabase(config, logger: TestEnvironment.logger) { db in
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<count {
                group.addTask {
                    try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                        _ = try await connection.query("SELECT pg_current_xact_id()", logger: TestEnvironment.logger)
                        opened.add()
                        while done.value == 0 { try await Task.sleep(for: .milliseconds(50)) }
                    }
                }
            }
            defer { done.add() }
            try await waitUntil("\(opened.value) of \(count) transactions opened", within: .seconds(120)) { opened.value == count }
            return try await body()
        }
    }
}

/// A thread-safe counter for test coordination.
private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
