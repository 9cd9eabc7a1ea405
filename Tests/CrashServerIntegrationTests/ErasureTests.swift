import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Erasure by device (data-protection.md, "Erasure"): once a deletion is done, every rollup
/// and every query answer is what a database that never received the device's reports holds
/// and answers, in the style of ``RollupEquivalenceTests``: project `erased` gets every report
/// and erases one device; project `fresh` gets only the other reports; both are compared table
/// by table (groups matched by signature) and answer by answer.
@Suite struct ErasureTests {
    static let gone = "gone-device"

    /// Reports of five groups over three days' hours, versions, oses, models, environments, fatal
    /// or not, from the device to erase and four others (two without an id): Alpha's oldest
    /// report is the device's (its firstSeen moves); Beta has only the device's (the group goes);
    /// Gamma groups by fingerprint and its oldest report's title is the device's (the title
    /// moves); Delta has none of them; Epsilon's fatal reports are all the device's.
    static func mix(_ tag: String) -> [TestReport] {
        let base = utcMidnight(daysAgo: 2)
        let devices: [String?] = [gone, "keep-1", "keep-2", nil, ""]
        return (0..<250).map { i in
            let group = i % 5
            var device = devices[(i / 5) % devices.count]
            if group == 1 { device = gone }
            if group == 3 && device == gone { device = "keep-1" }
            let names = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon"]
            var reason = "\(names[group]) \(tag) crashed"
            if group == 2 { reason = device == gone ? "Gamma \(tag) told by the gone device" : "Gamma \(tag) told by another one" }
            var report = queryReport(
                reason, at: base.addingTimeInterval(Double(i) * 613 - 40_000), kind: ["custom", "container"][group % 2],
                version: ["1.0.0", "2.0.0", "2.1.0"][i % 3], os: ["iOS", nil, "iPadOS"][(i / 2) % 3],
                model: ["iPhone14,2", nil, "iPad13,4"][(i / 3) % 3], device: device,
                fatal: group == 4 ? device == gone : [true, false, nil][(i / 4) % 3]
            ).object
            report["environment"] = ["production", "staging"][(i / 7) % 2]
            if group == 2 { report["fingerprint"] = ["gamma-\(tag)"] }
            return TestReport(object: report)
        }
    }

    static func isGone(_ report: TestReport) -> Bool { (report["device"] as? [String: Any])?["id"] as? String == gone }

    /// Each table derived from reports, its rows for project `$1` with groups named by signature.
    static let tables: [(name: String, sql: String)] = [
        (
            "crash_groups",
            "SELECT signature, grouping_version, kind, title, normalized_reason, report_count, first_seen, last_seen, fatal, status FROM crash_groups WHERE project_id = $1"
        ),
        ("reports", "SELECT r.id, r.ts, g.signature, r.device_id FROM reports r JOIN crash_groups g ON g.id = r.group_id WHERE r.project_id = $1"),
        ("report_ids", "SELECT id FROM report_ids WHERE project_id = $1"),
        (
            "group_hourly",
            "SELECT g.signature, h.hour, h.app_id, h.app_version, h.os, h.environment, h.count, h.fatal_count FROM group_hourly h JOIN crash_groups g ON g.id = h.group_id WHERE h.project_id = $1"
        ),
        (
            "group_daily",
            "SELECT g.signature, h.day, h.app_id, h.app_version, h.os, h.environment, h.count FROM group_daily h JOIN crash_groups g ON g.id = h.group_id WHERE h.project_id = $1"
        ),
        (
            "group_facets",
            "SELECT g.signature, f.facet, f.value, f.count, f.first_seen, f.last_seen FROM group_facets f JOIN crash_groups g ON g.id = f.group_id WHERE f.project_id = $1"
        ),
        (
            "group_environment_model_daily",
            """
            SELECT g.signature, m.environment, m.day, m.count, m.model, m.hours FROM group_environment_model_daily m
            JOIN crash_groups g ON g.id = m.group_id WHERE g.project_id = $1
            """
        ),
        ("project_hourly", "SELECT hour, kind, app_version, environment, count FROM project_hourly WHERE project_id = $1"),
        (
            "project_environment_hourly",
            "SELECT hour, environment, count, fatal_count FROM project_environment_hourly WHERE project_id = $1"
        ),
        (
            "group_environment_hours",
            "SELECT g.signature, e.environment, e.day, e.count, e.hours FROM group_environment_hours e JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1"
        ),
        (
            "group_version_hourly",
            "SELECT g.signature, v.app_version, v.hour, v.count, v.sketch FROM group_version_hourly v JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1"
        ),
        (
            "group_version_daily",
            "SELECT g.signature, v.app_version, v.day, v.count, v.sketch FROM group_version_daily v JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = $1"
        ),
        (
            "group_environment_daily",
            "SELECT g.signature, e.environment, e.app_version, e.day, e.count, e.sketch FROM group_environment_daily e JOIN crash_groups g ON g.id = e.group_id WHERE g.project_id = $1"
        ),
    ]

    @Test func aDoneDeletionLeavesWhatNeverReceivingTheReportsWouldHave() async throws {
        let erased = try await makeProject(), fresh = try await makeProject(), other = try await makeProject()
        let reports = Self.mix("e"), kept = reports.filter { !Self.isGone($0) }
        #expect(kept.count < reports.count - 50)
        try await withApp { client in
            try await client.send(reports, key: erased.ingestKey)
            try await client.send(kept, key: fresh.ingestKey)
            try await client.send(reports, key: other.ingestKey)
            let before = try await client.query("/v1/projects/\(erased.project)/crashes?\(Self.window)", token: erased.readToken)
            let beta = try #require(before.json.groups.first { ($0["title"] as? String)?.hasPrefix("Beta") == true })
            let answer = try await client.query(
                "/v1/projects/\(erased.project)/devices/\(Self.gone)", token: erased.readToken, method: .delete)
            #expect(answer.status == .accepted)
            let deletion = try #require(answer.json["deletion"] as? String)
            // Pending, unless a server's worker sharing this database was quicker.
            let pending = try await client.query("/v1/projects/\(erased.project)/deletions/\(deletion)", token: erased.readToken)
            #expect(pending.status == .ok && (pending.json["state"] as? String == "pending") == (pending.json["doneAt"] is NSNull))
            // Small steps: many chunks, each moving times, facets, sketches and titles again.
            try await withTestDatabase { db in
                let store = PostgresDeletionStore(database: db)
                while try await store.step(limit: 23) != nil {}
            }
            try await Self.drain()
            let done = try await client.query("/v1/projects/\(erased.project)/deletions/\(deletion)", token: erased.readToken)
            #expect(done.json["state"] as? String == "done", "\(done.json)")
            #expect(done.json["reports"] as? Int == reports.count - kept.count)
            #expect(done.json["doneAt"] is String && done.json["requestedAt"] is String)
            #expect(Set(done.json.keys) == ["deletion", "state", "reports", "requestedAt", "doneAt"])
            // Every answer equals the fresh project's.
            try await Self.expectSameAnswers(client, erased, fresh)
            // The emptied group is gone.
            let betaID = try #require(beta["id"] as? String)
            #expect(try await client.query("/v1/projects/\(erased.project)/crashes/\(betaID)", token: erased.readToken).status == .notFound)
            // The deletion keeps no copy of the device id, and no list once done.
            try await withTestDatabase { db in
                let rows = try await db.client.query(
                    """
                    SELECT device_hash IS NULL, (SELECT count(*) FROM deletion_reports WHERE deletion_id = d.id)
                    FROM deletions d WHERE id = \(UUID(uuidString: deletion)!)
                    """, logger: TestEnvironment.logger)
                for try await (forgotten, listed) in rows.decode((Bool, Int64).self) { #expect(forgotten && listed == 0) }
            }
        }
        try await Self.expectSameTables(erased.project, fresh.project)
        // The other project, which got the same reports, still has them all.
        try await withTestDatabase { db throws in
            #expect(try await db.storedReportIDs(slug: other.project).count == reports.count)
            #expect(try await db.rollupTotal(slug: other.project) == Int64(reports.count))
        }
    }

    /// After erasure the ledger has forgotten the ids: the same reports sent again are new, and
    /// the emptied group's signature starts a new group (new id, open, a `group.new` delivery).
    @Test func erasedReportsSentAgainAreNewAndStartANewGroup() async throws {
        let p = try await makeProject()
        let reports = Self.mix("r").filter(Self.isGone)
        try await withTestDatabase { db in
            _ = try await db.client.query(
                """
                INSERT INTO webhooks (project_id, url, events, format, secret)
                SELECT id, 'https://hooks.example.com/x', ARRAY['group.new'], 'json', 'whsec_test' FROM projects WHERE slug = \(p.project)
                """, logger: TestEnvironment.logger)
        }
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let before = try await client.query("/v1/projects/\(p.project)/crashes?\(Self.window)", token: p.readToken)
            let oldIDs = Set(before.json.groups.compactMap { $0["id"] as? String })
            #expect(oldIDs.count == 4, "Delta has none of the device's reports")
            #expect(try await client.query("/v1/projects/\(p.project)/devices/\(Self.gone)", token: p.readToken, method: .delete).status == .accepted)
            try await Self.drain()
            let empty = try await client.query("/v1/projects/\(p.project)/crashes?\(Self.window)", token: p.readToken)
            #expect(empty.json.groups.isEmpty, "\(empty.json)")
            for id in oldIDs {
                #expect(try await client.query("/v1/projects/\(p.project)/crashes/\(id)", token: p.readToken).status == .notFound)
            }
            let again = try await client.ingest(key: p.ingestKey, body: batchBody(reports.map(\.object)))
            let body = try again.decode(IngestResponse.self)
            #expect(body.accepted == reports.count && body.duplicates == 0)
            let after = try await client.query("/v1/projects/\(p.project)/crashes?\(Self.window)", token: p.readToken)
            let newIDs = Set(after.json.groups.compactMap { $0["id"] as? String })
            #expect(newIDs.count == 4 && newIDs.isDisjoint(with: oldIDs))
            #expect(after.json.groups.allSatisfy { $0["status"] as? String == "open" })
        }
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT count(DISTINCT d.group_id) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
                JOIN projects p ON p.id = w.project_id WHERE p.slug = \(p.project) AND d.event = 'group.new'
                """, logger: TestEnvironment.logger)
            for try await n in rows.decode(Int64.self) { #expect(n == 8, "4 groups made twice") }
        }
    }

    @Test func routesAnswerAsTheContractSays() async throws {
        let p = try await makeProject(), q = try await makeProject()
        try await withApp { client in
            // A device never seen: accepted all the same, done with 0.
            let unknown = try await client.query("/v1/projects/\(p.project)/devices/never-seen", token: p.readToken, method: .delete)
            #expect(unknown.status == .accepted)
            let id = try #require(unknown.json["deletion"] as? String)
            try await Self.drain()
            let done = try await client.query("/v1/projects/\(p.project)/deletions/\(id)", token: p.readToken)
            #expect(done.status == .ok && done.json["state"] as? String == "done" && done.json["reports"] as? Int == 0)
            // 404: unknown id, not an id, another project's deletion (with that project's token).
            #expect(try await client.query("/v1/projects/\(p.project)/deletions/\(UUID())", token: p.readToken).status == .notFound)
            #expect(try await client.query("/v1/projects/\(p.project)/deletions/nope", token: p.readToken).status == .notFound)
            #expect(try await client.query("/v1/projects/\(q.project)/deletions/\(id)", token: q.readToken).status == .notFound)
            // Another project's token, or an unknown project: 404; an ingest key or nothing: 401.
            #expect(try await client.query("/v1/projects/\(q.project)/devices/x", token: p.readToken, method: .delete).status == .notFound)
            #expect(try await client.query("/v1/projects/no-such-project/devices/x", token: p.readToken, method: .delete).status == .notFound)
            #expect(try await client.query("/v1/projects/\(p.project)/devices/x", token: p.ingestKey, method: .delete).status == .unauthorized)
            #expect(try await client.query("/v1/projects/\(p.project)/devices/x", token: nil, method: .delete).status == .unauthorized)
            #expect(try await client.query("/v1/projects/\(p.project)/deletions/\(id)", token: p.ingestKey).status == .unauthorized)
            // deviceId over 128 bytes: 400 naming it.
            let long = try await client.query(
                "/v1/projects/\(p.project)/devices/\(String(repeating: "d", count: 129))", token: p.readToken, method: .delete)
            #expect(long.status == .badRequest && long.json.error.hasPrefix("deviceId"), "\(long.json)")
            // A percent-encoded id is the id it encodes; reports of other devices stay.
            let slashed = queryReport("Slash crashed", at: utcMidnight(daysAgo: 1), device: "dev/1 é")
            let other = queryReport("Slash crashed", at: utcMidnight(daysAgo: 1), device: "dev")
            try await client.send([slashed, other], key: p.ingestKey)
            let erase = try await client.query(
                "/v1/projects/\(p.project)/devices/dev%2F1%20%C3%A9", token: p.readToken, method: .delete)
            let slashedID = try #require(erase.json["deletion"] as? String)
            try await Self.drain()
            let result = try await client.query("/v1/projects/\(p.project)/deletions/\(slashedID)", token: p.readToken)
            #expect(result.json["reports"] as? Int == 1)
            try await withTestDatabase { db throws in
                #expect(try await db.storedReportIDs(slug: p.project) == [UUID(uuidString: other["id"] as! String)!])
            }
        }
    }

    /// A worker that stops between steps (as a server that dies loses only its open
    /// transaction), while erasing chunks or while rebuilding the sketches they left stale,
    /// leaves a pending deletion with its progress; another worker finishes it, while new
    /// reports of the device, sent after the request, are kept. A private database: no other
    /// server's worker may take a step meanwhile.
    @Test func aDeletionLeftMidwayIsFinishedByAnotherWorker() async throws {
        try await withPrivateDatabase("erasure") { config in try await Self.leftMidway(config) }
    }

    static func leftMidway(_ config: ServerConfiguration) async throws {
        let p = try await makeProject(config), fresh = try await makeProject(config)
        let reports = Self.mix("k"), kept = reports.filter { !Self.isGone($0) }
        let later = queryReport("Alpha k crashed", at: utcMidnight(daysAgo: 1), device: Self.gone)
        try await withApp(config) { client in
            try await client.send(reports, key: p.ingestKey)
            try await client.send(kept + [later], key: fresh.ingestKey)
        }
        // No server runs now: the first worker's steps are the only ones.
        let metrics = ServerMetrics()
        let id = try await withTestDatabase(config) { db in
            let store = PostgresDeletionStore(database: db)
            let id = try await store.request(
                project: try await db.client.withConnection { try await Self.projectID(p.project, $0) }, device: Self.gone)
            // Listing, then two chunks; then a step that fails inside its transaction.
            for _ in 0..<3 { _ = try await store.step(limit: 10) }
            await #expect(throws: PostgresTransactionError.self) {
                try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                    _ = try await ReportEraser(logger: TestEnvironment.logger).erase(
                        project: try await Self.projectID(p.project, connection), keys: try await Self.listed(id, connection),
                        on: connection)
                    throw CancellationError()
                }
            }
            let project = try await db.client.withConnection { try await Self.projectID(p.project, $0) }
            let midway = try #require(try await store.deletion(project: project, id: id))
            #expect(midway.state == .pending && midway.reports == 20, "\(midway)")
            // Every chunk erased: the sketches of the buckets they touched wait, each listed once
            // however many chunks touched it, and none is rebuilt yet.
            while try await Self.count("deletion_reports", id, db) > 0 {
                guard case .erased = try await store.step(limit: 10) else {
                    Issue.record("a step other than a chunk")
                    break
                }
            }
            let buckets = Self.sketchBuckets(reports.filter(Self.isGone))
            #expect(try await Self.count("deletion_sketches", id, db) == buckets)
            // Then they are rebuilt, 5 per report of a chunk per step; a rebuild that dies leaves
            // its buckets listed for the next worker.
            #expect(try await store.step(limit: 10) == .rebuilt(id, sketches: 50))
            await #expect(throws: PostgresTransactionError.self) {
                try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                    let rows = try await connection.query(
                        "DELETE FROM deletion_sketches WHERE deletion_id = \(id) RETURNING daily, group_id, app_version, bucket",
                        logger: TestEnvironment.logger)
                    var keys: [ReportEraser.SketchKey] = []
                    for try await (daily, group, version, bucket) in rows.decode((Bool, Int64, String, Date).self) {
                        keys.append(.init(daily: daily, group: group, version: version, bucket: bucket))
                    }
                    try await ReportEraser(logger: TestEnvironment.logger).rebuildSketches(project: project, keys, on: connection)
                    throw CancellationError()
                }
            }
            #expect(try await Self.count("deletion_sketches", id, db) == buckets - 50)
            let erased = try #require(try await store.deletion(project: project, id: id))
            #expect(erased.state == .pending && erased.reports == reports.count - kept.count, "\(erased)")
            return id
        }
        try await withApp(config) { client in
            try await client.send([later], key: p.ingestKey)
            try await Self.drain(config, metrics: metrics)
            let done = try await client.query("/v1/projects/\(p.project)/deletions/\(id.uuidString.lowercased())", token: p.readToken)
            #expect(done.json["state"] as? String == "done" && done.json["reports"] as? Int == reports.count - kept.count, "\(done.json)")
            try await Self.expectSameAnswers(client, p, fresh)
        }
        try await Self.expectSameTables(p.project, fresh.project, config)
    }

    // MARK: - Helpers

    static var window: String { "from=\(q(utcMidnight(daysAgo: 5)))&to=\(q(Date()))&limit=100" }

    /// Runs every pending deletion to its end.
    /// A running app's own worker may hold a deletion meanwhile (its steps are skipped here):
    /// waits until none is pending.
    static func drain(_ config: ServerConfiguration = TestEnvironment.configuration(), metrics: ServerMetrics = ServerMetrics()) async throws {
        try await withTestDatabase(config) { db in
            let worker = DeletionWorker(
                store: PostgresDeletionStore(database: db), schemaApplied: db.schemaApplied, metrics: metrics,
                logger: TestEnvironment.logger)
            for _ in 0..<600 {
                try await worker.drain()
                let rows = try await db.client.query("SELECT count(*) FROM deletions WHERE state = 'pending'", logger: TestEnvironment.logger)
                var pending: Int64 = 0
                for try await n in rows.decode(Int64.self) { pending = n }
                if pending == 0 { return }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// Rows of deletion `id` in `table` (`deletion_reports`, `deletion_sketches`).
    static func count(_ table: String, _ id: UUID, _ db: CrashDatabase) async throws -> Int {
        let rows = try await db.client.query(
            "SELECT count(*) FROM \(unescaped: table) WHERE deletion_id = \(id)", logger: TestEnvironment.logger)
        for try await n in rows.decode(Int64.self) { return Int(n) }
        return 0
    }

    /// The device sketches `reports` (each with a device id) are in: (group, version or '' for
    /// all, hour or day); a group is named by the first word of its reason.
    static func sketchBuckets(_ reports: [TestReport]) -> Int {
        var buckets = Set<String>()
        for report in reports {
            let group = (report["reason"] as? String ?? "").split(separator: " ").first.map(String.init) ?? ""
            let version = (report["app"] as? [String: Any])?["version"] as? String ?? ""
            let time = RFC3339.parse(report["timestamp"] as? String ?? "") ?? .distantPast
            for unit in [TimeWindow.hour, TimeWindow.day] {
                for v in ["", version] { buckets.insert("\(group) \(v) \(unit) \(TimeWindow.floor(time, unit).timeIntervalSince1970)") }
            }
        }
        return buckets.count
    }

    static func projectID(_ slug: String, _ connection: PostgresConnection) async throws -> Int64 {
        let rows = try await connection.query("SELECT id FROM projects WHERE slug = \(slug)", logger: TestEnvironment.logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw CancellationError()
    }

    static func listed(_ deletion: UUID, _ connection: PostgresConnection) async throws -> [ReportEraser.Key] {
        let rows = try await connection.query(
            "SELECT ts, id FROM deletion_reports WHERE deletion_id = \(deletion)", logger: TestEnvironment.logger)
        var keys: [ReportEraser.Key] = []
        for try await (ts, id) in rows.decode((Date, UUID).self) { keys.append(.init(ts: ts, id: id)) }
        return keys
    }

    /// Every table derived from reports holds the same rows for both projects (and some).
    static func expectSameTables(_ a: String, _ b: String, _ config: ServerConfiguration = TestEnvironment.configuration()) async throws {
        try await withTestDatabase(config) { db in
            try await db.aggregateRollups()
            return try await db.client.withConnection { connection in
                // Another session time zone must not move the buckets.
                try await connection.query("SET TimeZone = 'Pacific/Chatham'", logger: TestEnvironment.logger)
                let (x, y) = (try await projectID(a, connection), try await projectID(b, connection))
                for table in tables {
                    var binds = PostgresBindings()
                    binds.append(x)
                    binds.append(y)
                    let mine = table.sql, theirs = table.sql.replacingOccurrences(of: "$1", with: "$2")
                    let sql = """
                        WITH a AS (\(mine)), b AS (\(theirs))
                        SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b),
                               (SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b) d)
                             + (SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a) e)
                        """
                    let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: TestEnvironment.logger)
                    for try await (na, nb, different) in rows.decode((Int64, Int64, Int64).self) {
                        #expect(na > 0 && na == nb && different == 0, "\(table.name): \(na) rows erased, \(nb) fresh, \(different) differ")
                    }
                }
            }
        }
    }

    /// The list, each group's detail and reports, and the stats answer the same for both
    /// projects, but for the groups' ids.
    static func expectSameAnswers(_ client: any TestClientProtocol, _ a: ProjectCredentials, _ b: ProjectCredentials) async throws {
        func answers(_ p: ProjectCredentials) async throws -> [String: String] {
            var out: [String: String] = [:]
            let list = try await client.query("/v1/projects/\(p.project)/crashes?\(window)", token: p.readToken)
            #expect(list.status == .ok)
            out["list"] = canonical(list.json.groups.map { $0.filter { $0.key != "id" } })
            for group in list.json.groups {
                let id = group["id"] as? String ?? "", title = group["title"] as? String ?? ""
                for path in ["", "/reports"] {
                    let answer = try await client.query(
                        "/v1/projects/\(p.project)/crashes/\(id)\(path)?\(window)", token: p.readToken)
                    #expect(answer.status == .ok, "\(path): \(answer.json)")
                    out[title + path] = canonical(answer.json.filter { $0.key != "id" && $0.key != "nextCursor" })
                }
            }
            for by in ["kind", "version", "environment"] {
                let stats = try await client.query("/v1/projects/\(p.project)/stats?\(window)&groupBy=\(by)", token: p.readToken)
                #expect(stats.status == .ok, "\(stats.json)")
                out["stats " + by] = canonical(stats.json)
            }
            return out
        }
        let (x, y) = (try await answers(a), try await answers(b))
        #expect(x.keys.sorted() == y.keys.sorted())
        for key in x.keys.sorted() { #expect(x[key] == y[key], "\(key)") }
    }

    /// `value` as JSON text with sorted keys and without `receivedAt` (when the server stored a
    /// report), at any depth.
    static func canonical(_ value: Any) -> String {
        func strip(_ value: Any) -> Any {
            if let object = value as? [String: Any] { return object.filter { $0.key != "receivedAt" }.mapValues(strip) }
            if let array = value as? [Any] { return array.map(strip) }
            return value
        }
        return String(decoding: (try? JSONSerialization.data(withJSONObject: strip(value), options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }
}
