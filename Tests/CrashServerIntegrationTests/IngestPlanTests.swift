import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The ingest sessions plan each statement once per connection (a generic plan,
/// ``IngestTimeouts``) with the statistics of that moment, and keep the plan until the next
/// `ANALYZE` of its tables. On a fresh database, before autovacuum's first `ANALYZE`, every
/// table looks empty: a scan of a whole table, or of an index that only narrows rows to a
/// project, looks as cheap as a probe of one key, and then grows with the table at every commit.
@Suite struct IngestPlanTests {
    @Test func theIngestStatementsReadRowsByKeyOnAFreshDatabase() async throws {
        try await withPrivateDatabase("crashguard_plans") { config in
            try await withTestDatabase(config) { db in
                try await db.ingestClient.withConnection { connection in
                    // Run once, with nothing to store, so that the connection has prepared them.
                    let logger = TestEnvironment.logger
                    for try await _ in try await connection.run(IngestSQL.ClaimAndCount.self, .init(), logger: logger) {}
                    for try await _ in try await connection.run(IngestSQL.WriteBatch.self, .init(), logger: logger) {}

                    let unique = try await uniqueIndexes(connection)
                    var tables: Set<String> = []
                    for name in [Prepared<IngestSQL.ClaimAndCount>.name, Prepared<IngestSQL.WriteBatch>.name] {
                        for read in tableReads(in: try await genericPlan(of: name, connection)) {
                            tables.insert(read.table)
                            // A project's webhooks are a handful of rows, read by project.
                            let byKey = read.condition && (unique.contains(read.index ?? "") || read.table == "webhooks")
                            #expect(byKey, "\(name): \(read.description)")
                        }
                    }
                    // The alerts' groups and the webhooks: the plans were read.
                    #expect(tables.isSuperset(of: ["crash_groups", "webhooks"]))
                }
            }
        }
    }

    /// The rollup aggregator reads the stored device sketches (``RollupSQL/ReadSketches``) on
    /// a connection of the main pool, whose sessions keep PostgreSQL's `plan_cache_mode =
    /// auto`: after five runs a connection keeps the generic plan whenever it looks cheaper
    /// than the custom ones, which on a fresh database it does for a fold of more than a few
    /// keys. So the generic plan, made on a fresh database, must probe the sketches by key.
    @Test func theAggregatorsSketchReadReadsRowsByKeyOnAFreshDatabase() async throws {
        try await withPrivateDatabase("crashguard_plans") { config in
            try await withTestDatabase(config) { db in
                try await db.client.withConnection { connection in
                    let logger = TestEnvironment.logger
                    for try await _ in try await connection.run(RollupSQL.ReadSketches.self, ([], [], BatchText([])), logger: logger) {}
                    let unique = try await uniqueIndexes(connection)
                    try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
                    let reads = tableReads(in: try await genericPlan(of: Prepared<RollupSQL.ReadSketches>.name, connection))
                    try await connection.query("RESET plan_cache_mode", logger: logger)
                    for read in reads {
                        #expect(read.condition && unique.contains(read.index ?? ""), "\(read.description)")
                    }
                    #expect(Set(reads.map(\.table)) == ["group_version_hourly", "group_version_daily"])
                }
            }
        }
    }

    /// The names of the database's unique indexes.
    func uniqueIndexes(_ connection: PostgresConnection) async throws -> Set<String> {
        let rows = try await connection.query(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indisunique", logger: TestEnvironment.logger)
        var names: Set<String> = []
        for try await name in rows.decode(String.self) { names.insert(name) }
        return names
    }

    /// The plan that the connection's prepared statement `name` runs with, as `EXPLAIN (FORMAT
    /// JSON)` gives it (every parameter NULL: the generic plan does not depend on them).
    func genericPlan(of name: String, _ connection: PostgresConnection) async throws -> [String: Any] {
        let count = try await connection.query(
            "SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = \(name)", logger: TestEnvironment.logger)
        var parameters = 0
        for try await n in count.decode(Int.self) { parameters = n }
        let quoted = "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        let arguments = parameters == 0 ? "" : "(" + Array(repeating: "NULL", count: parameters).joined(separator: ", ") + ")"
        let rows = try await connection.query(
            PostgresQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) EXECUTE \(quoted)\(arguments)"), logger: TestEnvironment.logger)
        var text = ""
        for try await line in rows.decode(String.self) { text += line }
        let plans = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]]
        return try #require(plans?.first?["Plan"] as? [String: Any])
    }

    /// A read of a table in a plan: its node, the index it goes through, and whether an index
    /// condition narrows what it reads (rather than reading the whole index).
    struct TableRead: CustomStringConvertible {
        var table: String
        var node: String
        var index: String?
        var condition: Bool
        var description: String { "\(node) on \(table)" + (index.map { " using \($0)" } ?? "") + (condition ? "" : " without a condition") }
    }

    /// Every node of `plan` that reads a table. Inserts and updates are not such reads: they
    /// find their rows through their arbiter index and their own keys. A bitmap heap scan reads
    /// what its bitmap index scan found, which is the node that names the index.
    func tableReads(in plan: [String: Any], table parent: String? = nil) -> [TableRead] {
        var reads: [TableRead] = []
        let node = plan["Node Type"] as? String ?? ""
        let table = plan["Relation Name"] as? String
        if let table, node != "ModifyTable", node != "Bitmap Heap Scan" {
            reads.append(TableRead(table: table, node: node, index: plan["Index Name"] as? String, condition: plan["Index Cond"] != nil))
        } else if node == "Bitmap Index Scan", let parent {
            reads.append(TableRead(table: parent, node: node, index: plan["Index Name"] as? String, condition: plan["Index Cond"] != nil))
        }
        for child in (plan["Plans"] as? [[String: Any]]) ?? [] {
            reads += tableReads(in: child, table: node == "Bitmap Heap Scan" ? table : nil)
        }
        return reads
    }
}
