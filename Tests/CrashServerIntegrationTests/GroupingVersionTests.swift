import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Per-project grouping versions against the real PostgreSQL: new projects group with v2,
/// a project keeps the version it was given, a switch changes how new reports group but
/// never regroups stored ones, the API shows each group's version, and the preview is a dry run.
@Suite("Grouping versions")
struct GroupingVersionTests {
    /// Two occurrences of one NSInternalInconsistencyException site, and one of another
    /// site with the same reason: v1 sees one group (same reason and same three machinery
    /// frames), v2 two (the app frames past the machinery differ).
    static func exceptionStack(_ method: String) -> [String] {
        let address = { "0x00000001" + String(UInt32.random(in: 0...UInt32.max), radix: 16) }
        return [
            "0   CoreFoundation   \(address()) __exceptionPreprocess + 164",
            "1   libobjc.A.dylib  \(address()) objc_exception_throw + 60",
            "2   Foundation       \(address()) _userInfoForFileAndLine + 0",
            "3   UIKitCore        \(address()) -[UITableView _endCellAnimationsWithContext:] + 1234",
            "4   Shop             \(address()) -[FeedViewController \(method)] + 88",
            "5   Shop             \(address()) -[FeedViewController viewDidLoad] + 40",
            "6   UIKitCore        \(address()) UIApplicationMain + 340",
        ]
    }

    static let reason =
        "Invalid update: invalid number of rows in section 0. The number of rows after the update (3) must be equal to the number before the update (4)"

    static func reports(now: Date) -> [TestReport] {
        [
            queryReport(Self.reason, at: now.addingTimeInterval(-60), kind: "exception", stack: exceptionStack("reload")),
            queryReport(
                Self.reason.replacingOccurrences(of: "(3)", with: "(-3)"), at: now.addingTimeInterval(-50), kind: "exception",
                stack: exceptionStack("reload")),
            queryReport(Self.reason, at: now.addingTimeInterval(-40), kind: "exception", stack: exceptionStack("insertRows")),
        ]
    }

    func groups(_ client: some TestClientProtocol, _ slug: String, _ token: String) async throws -> [[String: Any]] {
        let list = try await client.query("/v1/projects/\(slug)/crashes", token: token)
        #expect(list.status == .ok)
        return list.json.groups
    }

    @Test("a new project groups with v2; --grouping v1 keeps v1; the list and detail show each group's version")
    func newProjectsDefaultToV2() async throws {
        let v2 = try await makeProject()
        let v1 = try await withTestDatabase {
            try await PostgresProjectStore(database: $0).create(slug: "g1-" + UUID().uuidString.lowercased().prefix(12), grouping: .v1)
        }
        try await withApp { client in
            let now = Date()
            try await client.send(Self.reports(now: now), key: v2.ingestKey)
            try await client.send(Self.reports(now: now), key: v1.ingestKey)

            let groupsV2 = try await groups(client, v2.project, v2.readToken)
            #expect(groupsV2.count == 2, "v2: the two sites are two groups, (-3) and (3) one")
            #expect(groupsV2.allSatisfy { $0["groupingVersion"] as? String == "v2" })
            #expect(groupsV2.map { $0["count"] as? Int ?? 0 }.sorted() == [1, 2])

            let groupsV1 = try await groups(client, v1.project, v1.readToken)
            #expect(groupsV1.count == 2, "v1: (-3) and (3) split; the two sites merge")
            #expect(groupsV1.allSatisfy { $0["groupingVersion"] as? String == "v1" })

            let id = try #require(groupsV2.first?["id"] as? String)
            let detail = try await client.query("/v1/projects/\(v2.project)/crashes/\(id)", token: v2.readToken)
            #expect(detail.status == .ok)
            #expect(detail.json["groupingVersion"] as? String == "v2")
        }
        let versions = try await withTestDatabase { db in
            (
                try await PostgresProjectStore(database: db).groupingVersion(slug: v2.project),
                try await PostgresProjectStore(database: db).groupingVersion(slug: v1.project)
            )
        }
        #expect(versions.0 == .v2 && versions.1 == .v1)
    }

    @Test("a switch groups new reports with the new version and keeps stored groups as they are")
    func switchKeepsStoredGroups() async throws {
        let slug = "g1-" + UUID().uuidString.lowercased().prefix(12)
        let project = try await withTestDatabase { try await PostgresProjectStore(database: $0).create(slug: String(slug), grouping: .v1) }
        try await withApp { client in
            let now = Date()
            try await client.send(Self.reports(now: now), key: project.ingestKey)
            let before = try await groups(client, project.project, project.readToken)
            #expect(before.count == 2)

            // The preview reads and reports; it changes nothing.
            let preview = try await withTestDatabase {
                try await PostgresProjectStore(database: $0).groupingPreview(slug: project.project, target: .v2, days: 7)
            }
            #expect(preview.currentVersion == "v1" && preview.targetVersion == "v2")
            #expect(preview.reports == 3)
            #expect(preview.groupsNow == 2 && preview.groupsAfter == 2)
            // v1's group of (3) holds both sites: it splits; (-3) joins the reload site: a merge.
            #expect(preview.split == 1 && preview.merged == 1 && preview.unchanged == 0)
            #expect(preview.splitExamples.first?.into == 2)
            let still = try await withTestDatabase { try await PostgresProjectStore(database: $0).groupingVersion(slug: project.project) }
            #expect(still == .v1)

            let previous = try await withTestDatabase {
                try await PostgresProjectStore(database: $0).setGroupingVersion(slug: project.project, to: .v2)
            }
            #expect(previous == .v1)
            // The ingest path reads the version with the key (no restart).
            try await client.send(Self.reports(now: now.addingTimeInterval(1)), key: project.ingestKey)
            let after = try await groups(client, project.project, project.readToken)
            #expect(after.count == 4, "the two v1 groups stay; the new reports make two v2 groups")
            let counts = Dictionary(grouping: after, by: { $0["groupingVersion"] as? String ?? "?" }).mapValues {
                $0.map { $0["count"] as? Int ?? 0 }.sorted()
            }
            #expect(counts["v1"] == [1, 2], "stored v1 groups keep their reports")
            #expect(counts["v2"] == [1, 2])
        }
        await #expect(throws: ProjectError.self) {
            try await withTestDatabase {
                try await PostgresProjectStore(database: $0).setGroupingVersion(
                    slug: "no-such-project-\(UUID().uuidString.prefix(6).lowercased())", to: .v2)
            }
        }
    }

    @Test("projects that existed before the grouping column keep v1; new ones get v2")
    func migrationKeepsExistingProjectsOnV1() async throws {
        // A private database, so dropping the column never disturbs tests running beside this one.
        try await withPrivateDatabase("crashguard_gv") { config in
            try await withTestDatabase(config) { db in
                // The database as it was before this schema: no column, and an older schema recorded.
                _ = try await db.client.query("ALTER TABLE projects DROP COLUMN grouping_version", logger: TestEnvironment.logger)
                _ = try await db.client.query("DELETE FROM schema_versions", logger: TestEnvironment.logger)
                _ = try await db.client.query(
                    "INSERT INTO projects (slug, ingest_key_hash, read_token_hash) VALUES ('old', '\\x01', '\\x02')",
                    logger: TestEnvironment.logger)
                try await PostgresSchemaMaintenance(database: db).migrate()
                try await PostgresSchemaMaintenance(database: db).migrate()  // idempotent
                _ = try await PostgresProjectStore(database: db).create(slug: "new")
                #expect(try await PostgresProjectStore(database: db).groupingVersion(slug: "old") == .v1)
                #expect(try await PostgresProjectStore(database: db).groupingVersion(slug: "new") == .v2)
                // A project inserted without a version (an older server during a rolling deploy) gets v2.
                _ = try await db.client.query(
                    "INSERT INTO projects (slug, ingest_key_hash, read_token_hash) VALUES ('bare', '\\x03', '\\x04')",
                    logger: TestEnvironment.logger)
                #expect(try await PostgresProjectStore(database: db).groupingVersion(slug: "bare") == .v2)
                let list = try await PostgresProjectStore(database: db).listJSON()
                #expect(list.contains(#""groupingVersion" : "v1""#) && list.contains(#""groupingVersion" : "v2""#))
            }
        }
    }
}

@Suite("Regroup comparison")
struct RegroupComparisonTests {
    @Test("splits, merges and unchanged groups are counted from the two partitions")
    func counts() {
        var c = RegroupComparison()
        // Group 1 splits into a and b; groups 2 and 3 merge into c; group 4 stays d.
        for (group, signature) in [(1, "a"), (1, "b"), (1, "a"), (2, "c"), (3, "c"), (4, "d"), (4, "d")] {
            c.add(group: Int64(group), signature: signature, title: signature)
        }
        let r = c.result()
        #expect(c.reports == 7)
        #expect(r.groupsNow == 4 && r.groupsAfter == 4)
        #expect(r.unchanged == 1)
        #expect(r.splits.map(\.group) == [1] && r.splits.first?.into == 2)
        #expect(r.merges.map(\.groups) == [[2, 3]])
    }
}
