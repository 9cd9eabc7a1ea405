import CrashCompression
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `POST /v1/reports` against the real database: every status of the contract, with what
/// the database holds afterwards.
@Suite struct IngestTests {
    @Test func acceptsAndStoresAValidBatch() async throws {
        let project = try await makeProject()
        let ids = (0..<3).map { _ in UUID() }
        try await withApp { client in
            let response = try await client.ingest(
                key: project.ingestKey, body: batchBody(ids.map { reportJSON(id: $0) } + [["id": "nope"], 42]))
            #expect(response.status == .accepted)
            let body = try response.decode(IngestResponse.self)
            #expect(body.accepted == 3)
            #expect(body.duplicates == 0)
            #expect(body.rejected.map(\.index) == [3, 4])
            #expect(body.rejected[0].error.hasPrefix("id:"))
            #expect(body.rejected[1].error.contains("object"))
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(Set(try await db.storedReportIDs(slug: project.project)) == Set(ids))
            let groups = try await db.groups(slug: project.project)
            #expect(groups.count == 1)
            #expect(groups.first?.count == 3)
            #expect(groups.first?.title == "-[__NSArrayI objectAtIndex:]: index <n> beyond bounds [<n> .. <n>]")
            #expect(try await db.rollupTotal(slug: project.project) == 3)
        }
    }

    @Test(arguments: ["gzip", "deflate", "br", "zstd", "identity", "GZIP"])
    func acceptsEveryEncoding(_ encoding: String) async throws {
        let project = try await makeProject()
        try await withApp { client in
            let response = try await client.ingest(
                key: project.ingestKey, body: batchBody([reportJSON()]), encoding: encoding,
                contentType: "Application/JSON; charset=utf-8")
            #expect(response.status == .accepted)
            #expect(try response.decode(IngestResponse.self).accepted == 1)
        }
    }

    @Test func retriesNeverDoubleCount() async throws {
        let project = try await makeProject()
        let id = UUID()
        let body = batchBody([reportJSON(id: id), reportJSON(), reportJSON(id: id), ["kind": "container"]])
        try await withApp { client in
            let first = try await client.ingest(key: project.ingestKey, body: body).decode(IngestResponse.self)
            #expect(first.accepted == 2)
            #expect(first.duplicates == 1)  // the same id twice in one batch stores once
            #expect(first.rejected.count == 1)
            let again = try await client.ingest(key: project.ingestKey, body: body).decode(IngestResponse.self)
            #expect(again.accepted == 0)
            #expect(again.duplicates == 3)
            #expect(again.accepted + again.duplicates + again.rejected.count == 4)
            // Upper-case id of a stored report is the same report.
            var upper = reportJSON(id: id)
            upper["id"] = id.uuidString.uppercased()
            upper["reason"] = "different content, same id"
            let third = try await client.ingest(key: project.ingestKey, body: batchBody([upper])).decode(IngestResponse.self)
            #expect(third.duplicates == 1)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 2)
            #expect(try await db.groups(slug: project.project).map(\.count) == [2])
        }
    }

    @Test func concurrentDuplicateBatchesStoreEachIdOnce() async throws {
        let project = try await makeProject()
        let ids = (0..<50).map { _ in UUID() }
        let body = batchBody(ids.map { reportJSON(id: $0) })
        try await withApp { client in
            let total = await withTaskGroup(of: Int.self) { group in
                for _ in 0..<16 {
                    group.addTask {
                        let r = try? await client.ingest(key: project.ingestKey, body: body).decode(IngestResponse.self)
                        #expect(r.map { $0.accepted + $0.duplicates } == 50)
                        return r?.accepted ?? -1000
                    }
                }
                return await group.reduce(0, +)
            }
            #expect(total == 50)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project) == ids.sorted { $0.uuidString < $1.uuidString })
            #expect(try await db.groups(slug: project.project).map(\.count) == [50])
            #expect(try await db.rollupTotal(slug: project.project) == 50)
        }
    }

    @Test func groupsVariantsAndSeparatesBugs() async throws {
        let project = try await makeProject()
        let reports: [[String: Any]] = [
            reportJSON(reason: "-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]"),
            reportJSON(reason: "-[__NSArrayI objectAtIndex:]: index 17 beyond bounds [0 .. 9]"),
            reportJSON(
                reason: "2018-03-18 14:43:32.340558+0800 Demo[2900:449839] -[__NSArrayI objectAtIndex:]: index 1 beyond bounds [0 .. 0]"),
            reportJSON(kind: "unrecognizedSelector", reason: "-[Student foo]: unrecognized selector sent to instance 0x7f8740e21bb0"),
            reportJSON(kind: "unrecognizedSelector", reason: "-[Student foo]: unrecognized selector sent to instance 0x600000c0a1e0"),
            reportJSON(kind: "unrecognizedSelector", reason: "-[Student bar]: unrecognized selector sent to instance 0x7f8740e21bb0"),
            reportJSON(kind: "unrecognizedSelector", reason: "-[Teacher foo]: unrecognized selector sent to instance 0x7f8740e21bb0"),
            reportJSON(kind: "custom", reason: "anything", extra: ["fingerprint": ["checkout", "payment"]]),
            reportJSON(kind: "custom", reason: "anything else entirely", extra: ["fingerprint": ["checkout", "payment"]]),
            reportJSON(kind: "custom", reason: "anything", extra: ["fingerprint": ["checkoutpayment"]]),
        ]
        let body = batchBody(reports)
        let count = reports.count
        try await withApp { client in
            let r = try await client.ingest(key: project.ingestKey, body: body).decode(IngestResponse.self)
            #expect(r.accepted == count)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            let counts = try await db.groups(slug: project.project).map(\.count)
            #expect(counts == [3, 2, 2, 1, 1, 1])
        }
    }

    @Test func badBodiesAre400AndStoreNothing() async throws {
        let project = try await makeProject()
        let valid = gzip(batchBody([reportJSON()]))
        let cases: [(String, [UInt8], String?)] = [
            ("empty", [], nil),
            ("not json", Array("hello".utf8), nil),
            ("array", Array("[1,2]".utf8), nil),
            ("no reports", Array("{\"report\": []}".utf8), nil),
            ("reports not array", Array("{\"reports\": {}}".utf8), nil),
            ("zero reports", Array("{\"reports\": []}".utf8), nil),
            ("1001 reports", batchBody(Array(repeating: reportJSON(), count: 1001)), nil),
            ("invalid utf8", [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D], nil),
            ("truncated gzip", Array(valid.dropLast(12)), "gzip"),
            ("corrupt gzip", Array(valid.prefix(10)) + [UInt8](repeating: 0xAB, count: 40), "gzip"),
            ("gzip of invalid utf8", gzip([0x7B, 0xFF, 0x7D]), "gzip"),
            ("not gzip", Array("{\"reports\": []}".utf8), "gzip"),
        ]
        try await withApp { client in
            for (name, body, encoding) in cases {
                var headers: HTTPFields = [.contentType: "application/json", HTTPField.Name("X-Crash-Key")!: project.ingestKey]
                if let encoding { headers[.contentEncoding] = encoding }
                let response = try await client.execute(uri: "/v1/reports", method: .post, headers: headers, body: ByteBuffer(bytes: body))
                #expect(response.status == .badRequest, "\(name)")
                #expect(response.errorMessage?.isEmpty == false, "\(name)")
            }
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).isEmpty)
        }
    }

    @Test func authenticationIs401() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let missing = try await client.ingest(key: nil, body: batchBody([reportJSON()]))
            #expect(missing.status == .unauthorized)
            #expect(missing.errorMessage?.contains("X-Crash-Key") == true)
            // The challenge names the header, not the read API's Bearer scheme.
            #expect(missing.headers[.wwwAuthenticate] == #"CrashKey header="X-Crash-Key""#)
            #expect(try await client.ingest(key: "cgi_unknown", body: batchBody([reportJSON()])).status == .unauthorized)
            // A read token is not an ingest key.
            #expect(try await client.ingest(key: project.readToken, body: batchBody([reportJSON()])).status == .unauthorized)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).isEmpty)
        }
    }

    @Test func rotatedKeysStopAtOnce() async throws {
        let project = try await makeProject()
        try await withApp { client in
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let rotated = try await withTestDatabase { try await PostgresProjectStore(database: $0).rotate(slug: project.project) }
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .unauthorized)
            #expect(try await client.ingest(key: rotated.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
        }
    }

    @Test func mediaTypesAndEncodingsAre415() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let body = batchBody([reportJSON()])
            let noType = try await client.ingest(key: project.ingestKey, body: body, contentType: nil)
            #expect(noType.status == .unsupportedMediaType)
            #expect(noType.errorMessage?.contains("Content-Type") == true)
            #expect(try await client.ingest(key: project.ingestKey, body: body, contentType: "text/plain").status == .unsupportedMediaType)
            let compress = try await client.ingest(key: project.ingestKey, body: body, encoding: "compress")
            #expect(compress.status == .unsupportedMediaType)
            #expect(compress.errorMessage?.contains("Content-Encoding") == true)
            // br and zstd are decoded, not refused: a plain body labelled with them is corrupt (400).
            for encoding in ["br", "zstd"] {
                var labelled = HTTPFields()
                labelled[.contentEncoding] = encoding
                let answer = try await client.ingest(key: project.ingestKey, body: body, encoding: nil, headers: labelled)
                #expect(answer.status == .badRequest)
            }
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).isEmpty)
        }
    }

    @Test func sizeLimitsAre413AndExactLimitsPass() async throws {
        let project = try await makeProject()
        // One timestamp for every report here, so bodies that differ only in id have one size.
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let body = batchBody([reportJSON(timestamp: now)])
        // Pad with trailing white space (still valid JSON) to exact sizes.
        let limit = body.count + 100
        let exact = body + [UInt8](repeating: 0x20, count: 100)
        let config = TestEnvironment.configuration {
            $0.maxDecompressedBytes = limit
            $0.maxBodyBytes = 1 << 20
        }
        try await withApp(config) { client in
            #expect(try await client.ingest(key: project.ingestKey, body: exact, encoding: "identity").status == .accepted)
            let over = try await client.ingest(key: project.ingestKey, body: exact + [0x20], encoding: "identity")
            #expect(over.status == .contentTooLarge)
            // Same size, another id: the same bytes again would be a duplicate.
            let exact2 = batchBody([reportJSON(timestamp: now)]) + [UInt8](repeating: 0x20, count: 100)
            #expect(exact2.count == exact.count)
            #expect(try await client.ingest(key: project.ingestKey, body: exact2, encoding: "gzip").status == .accepted)
            let overGz = try await client.ingest(key: project.ingestKey, body: exact + [0x20], encoding: "gzip")
            #expect(overGz.status == .contentTooLarge)
            #expect(overGz.errorMessage?.contains("decompressed") == true)
        }
        let small = TestEnvironment.configuration { $0.maxBodyBytes = 1000 }
        try await withApp(small) { client in
            let big = batchBody([reportJSON(reason: String(repeating: "x", count: 3000))])
            let response = try await client.ingest(key: project.ingestKey, body: big, encoding: "identity")
            #expect(response.status == .contentTooLarge)
            #expect(response.errorMessage?.contains("1000") == true)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 2)
        }
    }

    @Test func zipBombIsRefusedQuickly() async throws {
        let project = try await makeProject()
        // 64 gzip members of 16 MiB of zeros each: about 1 GiB inflated from ~1 MiB.
        let member = try Deflater.compress([UInt8](repeating: 0, count: 16 << 20), format: .gzip, level: 9)
        var members: [UInt8] = []
        while members.count + member.count <= 1 << 20 { members += member }
        let bomb = members
        try await withApp { client in
            var headers: HTTPFields = [.contentType: "application/json", .contentEncoding: "gzip"]
            headers[HTTPField.Name("X-Crash-Key")!] = project.ingestKey
            let started = ContinuousClock.now
            let response = try await client.execute(uri: "/v1/reports", method: .post, headers: headers, body: ByteBuffer(bytes: bomb))
            let elapsed = ContinuousClock.now - started
            #expect(response.status == .contentTooLarge)
            #expect(response.errorMessage?.contains("decompressed") == true)
            // Inflation stops at the 16 MiB cap rather than inflating ~1 GiB.
            #expect(elapsed < .seconds(5))
        }
    }

    @Test func rateLimitIs429WithRetryAfter() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.rateLimit = 0.5
            $0.rateBurst = 2
        }
        try await withApp(config) { client in
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let limited = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()]))
            #expect(limited.status == .tooManyRequests)
            let retry = try #require(limited.headers[.retryAfter].flatMap(Int.init))
            #expect(retry >= 1 && retry <= 2)
            #expect(limited.errorMessage?.contains("rate limit") == true)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 2)
        }
    }

    @Test func invalidReportsNameTheirField() async throws {
        let project = try await makeProject()
        let old = Date().addingTimeInterval(-31 * 86_400)
        let reports: [Any] = [
            reportJSON(extra: ["kind": "segfault"]),
            reportJSON(timestamp: old),
            reportJSON(extra: ["reason": ""]),
            reportJSON(extra: ["app": ["id": "x"]]),
            reportJSON(extra: ["stack": Array(repeating: "frame", count: 257)]),
            reportJSON(extra: ["context": ["k": 5]]),
            reportJSON(extra: ["fatal": "yes"]),
            reportJSON(extra: ["timestamp": "yesterday"]),
            reportJSON(extra: ["reason": "nul \u{0} inside"]),
            reportJSON(extra: ["device": ["os": "", "model": ""]]),
        ]
        let request = batchBody(reports)
        try await withApp { client in
            let body = try await client.ingest(key: project.ingestKey, body: request).decode(IngestResponse.self)
            #expect(body.accepted == 1)
            let errors = Dictionary(uniqueKeysWithValues: body.rejected.map { ($0.index, $0.error) })
            #expect(errors[0]?.hasPrefix("kind:") == true)
            #expect(errors[1]?.hasPrefix("timestamp:") == true)
            #expect(errors[2]?.hasPrefix("reason:") == true)
            #expect(errors[3]?.hasPrefix("app.version:") == true)
            #expect(errors[4]?.hasPrefix("stack:") == true)
            #expect(errors[5]?.hasPrefix("context.k:") == true)
            #expect(errors[6]?.hasPrefix("fatal:") == true)
            #expect(errors[7]?.hasPrefix("timestamp:") == true)
            #expect(errors[8]?.hasPrefix("reason:") == true)
            #expect(errors[9] == nil)
        }
    }

    /// The ingest transaction binds every column as a binary array (`unnest`), the nullable
    /// ones with NULL elements and `stack`/`fingerprint`/`context` as their JSON text: absent
    /// stays NULL, `""`/`[]`/`{}` stay themselves, and quotes, backslashes, every control
    /// character but NUL (refused at validation), U+2028 and non-ASCII come back exactly,
    /// through the database and `GET .../reports`.
    @Test func everyColumnRoundTripsExactly() async throws {
        let config = TestEnvironment.configuration()
        let project = try await makeProject(config)
        let trip = RoundTrip()
        try await trip.store(project, config)
        try await trip.verify(project, config)
    }

    /// A database from before the JSON columns were `text`: the migration moves its `jsonb`
    /// columns aside (`stack_jsonb`, ...) without rewriting a row; the reports stored before
    /// come back exactly as they did, and new ones go into the `text` columns.
    @Test func reportsStoredInJSONBColumnsSurviveTheMigration() async throws {
        try await withPrivateDatabase("crashguard_jsonb") { config in
            let trip = RoundTrip()
            let before = try await makeProject(config)
            try await trip.store(before, config)
            try await withTestDatabase(config) { db in
                // The table as it was: stack, fingerprint and context jsonb, no *_jsonb columns.
                for statement: PostgresQuery in [
                    "ALTER TABLE reports DROP COLUMN stack_jsonb, DROP COLUMN fingerprint_jsonb, DROP COLUMN context_jsonb",
                    """
                    ALTER TABLE reports ALTER COLUMN stack TYPE jsonb USING stack::jsonb,
                        ALTER COLUMN fingerprint TYPE jsonb USING fingerprint::jsonb, ALTER COLUMN context TYPE jsonb USING context::jsonb
                    """,
                    "DELETE FROM schema_versions",
                ] {
                    _ = try await db.client.query(statement, logger: TestEnvironment.logger)
                }
                try await PostgresSchemaMaintenance(database: db).migrate()
                let types = try await db.client.query(
                    """
                    SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
                    WHERE attrelid = 'reports'::regclass AND attnum > 0 AND NOT attisdropped
                      AND attname IN ('stack', 'fingerprint', 'context', 'stack_jsonb', 'fingerprint_jsonb', 'context_jsonb')
                    ORDER BY attname
                    """, logger: TestEnvironment.logger)
                var found: [String] = []
                for try await (name, type) in types.decode((String, String).self) { found.append("\(name) \(type)") }
                #expect(
                    found == [
                        "context text", "context_jsonb jsonb", "fingerprint text", "fingerprint_jsonb jsonb", "stack text", "stack_jsonb jsonb",
                    ])
            }
            try await trip.verify(before, config)
            let after = try await makeProject(config)
            try await trip.store(after, config)
            try await trip.verify(after, config)
        }
    }

    /// A database of the version before: the ledger's `ts` required and written, the listing
    /// index with `id`. The migration makes `ts` nullable (this version writes none; a server of
    /// the version before, beside the migrated database, still can) and replaces the index; the
    /// reports stored before list as they were, and new ones store.
    @Test func theLedgersTimestampAndTheListingIndexsIdGoAtTheMigration() async throws {
        try await withPrivateDatabase("crashguard_lean") { config in
            let trip = RoundTrip()
            let before = try await makeProject(config)
            try await trip.store(before, config)
            try await withTestDatabase(config) { db in
                let logger = TestEnvironment.logger
                for statement: PostgresQuery in [
                    "UPDATE report_ids SET ts = now()",
                    "ALTER TABLE report_ids ALTER COLUMN ts SET NOT NULL",
                    "DROP INDEX reports_group_ts",
                    "CREATE INDEX reports_group_ts ON reports (group_id, ts DESC, id DESC)",
                    "DELETE FROM schema_versions",
                ] {
                    _ = try await db.client.query(statement, logger: logger)
                }
                try await PostgresSchemaMaintenance(database: db).migrate()
                let shape = try await db.client.query(
                    """
                    SELECT pg_get_indexdef('reports_group_ts'::regclass),
                           (SELECT NOT attnotnull FROM pg_attribute WHERE attrelid = 'report_ids'::regclass AND attname = 'ts')
                    """, logger: logger)
                for try await (index, nullable) in shape.decode((String, Bool).self) {
                    #expect(index.hasSuffix("(group_id, ts DESC)"), "\(index)")
                    #expect(nullable)
                }
                // What a server of the version before writes.
                _ = try await db.client.query(
                    "INSERT INTO report_ids (project_id, id, ts) VALUES (-1, \(UUID()), now())", logger: logger)
            }
            try await trip.verify(before, config)
            let after = try await makeProject(config)
            try await trip.store(after, config)
            try await trip.verify(after, config)
            let written = try await withTestDatabase(config) { db in
                try await db.client.query(
                    "SELECT count(ts) FROM report_ids r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(after.project)",
                    logger: TestEnvironment.logger
                ).collect().first?.decode(Int.self)
            }
            #expect(written == 0)
        }
    }

    /// A database made before `project_environment_hourly`, `group_environment_hours` and
    /// `group_environment_model_daily` gets them filled at the migration (the first two from
    /// `group_hourly`, the last from the stored reports):
    /// each equal, row for row, to its definition from the stored reports. The models tables it
    /// had instead (`group_model_daily`, and before it `group_model_hourly`) go, and the
    /// queries answer as before.
    @Test func theRollupsOfADatabaseMadeBeforeThemAreFilledAtTheMigration() async throws {
        try await withPrivateDatabase("crashguard_totals") { config in
            let trip = RoundTrip()
            let project = try await makeProject(config)
            try await trip.store(project, config)
            // Folded: a query waits for the aggregator to pass what was committed before it.
            try await trip.verify(project, config)
            try await withTestDatabase(config) { db in
                let logger = TestEnvironment.logger
                for statement: PostgresQuery in [
                    "DROP TABLE project_environment_hourly", "DROP TABLE group_environment_model_daily",
                    "DROP TABLE group_environment_hours", "DELETE FROM schema_versions",
                    "CREATE TABLE group_model_daily (group_id bigint, day timestamptz, count bigint, model text, hours bytea)",
                    "CREATE TABLE group_model_hourly (group_id bigint, hour timestamptz, model text, count bigint)",
                ] {
                    _ = try await db.client.query(statement, logger: logger)
                }
                try await PostgresSchemaMaintenance(database: db).migrate()
                let rows = try await db.client.query(
                    """
                    WITH p AS (SELECT id FROM projects WHERE slug = \(project.project)),
                    t AS (SELECT e.project_id, e.hour, e.environment, e.count, e.fatal_count FROM project_environment_hourly e JOIN p ON p.id = e.project_id),
                    d AS (SELECT x.* FROM p, crashguard_rollup_project_environment_hourly(p.id) x),
                    tm AS (SELECT m.group_id, m.environment, m.day, m.model, m.count, m.hours FROM group_environment_model_daily m
                           JOIN crash_groups g ON g.id = m.group_id JOIN p ON p.id = g.project_id),
                    dm AS (SELECT x.* FROM p, crashguard_rollup_group_environment_model_daily(p.id) x),
                    te AS (SELECT e.group_id, e.environment, e.day, e.count, e.hours FROM group_environment_hours e
                           JOIN crash_groups g ON g.id = e.group_id JOIN p ON p.id = g.project_id),
                    de AS (SELECT x.* FROM p, crashguard_rollup_group_environment_hours(p.id) x)
                    SELECT (SELECT count(*) FROM t), (SELECT sum(fatal_count) FROM t)::bigint,
                           (SELECT count(*) FROM ((TABLE t EXCEPT ALL TABLE d) UNION ALL (TABLE d EXCEPT ALL TABLE t)) x),
                           (SELECT count(*) FROM tm),
                           (SELECT count(*) FROM ((TABLE tm EXCEPT ALL TABLE dm) UNION ALL (TABLE dm EXCEPT ALL TABLE tm)) x),
                           (SELECT count(*) FROM te),
                           (SELECT count(*) FROM ((TABLE te EXCEPT ALL TABLE de) UNION ALL (TABLE de EXCEPT ALL TABLE te)) x),
                           to_regclass('group_model_daily') IS NULL AND to_regclass('group_model_hourly') IS NULL
                    """, logger: logger)
                for try await (totals, fatal, totalsDiffer, models, modelsDiffer, hours, hoursDiffer, gone) in rows.decode(
                    (Int64, Int64?, Int64, Int64, Int64, Int64, Int64, Bool).self)
                {
                    #expect(totals > 0 && models > 0 && hours > 0)
                    #expect(fatal == 1)
                    #expect(totalsDiffer == 0 && modelsDiffer == 0 && hoursDiffer == 0)
                    #expect(gone)
                }
            }
            try await trip.verify(project, config)
        }
    }

    @Test func healthReadinessAndMetrics() async throws {
        let project = try await makeProject()
        try await withApp { client in
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
            // HEAD wherever GET works (RFC 9110 9.1): the status and headers, no body.
            for uri in ["/healthz", "/readyz", "/metrics", "/"] {
                let get = try await client.execute(uri: uri, method: .get)
                let head = try await client.execute(uri: uri, method: .head)
                #expect(head.status == get.status, "\(uri)")
                #expect(head.headers[.contentType] == get.headers[.contentType], "\(uri)")
                #expect(head.body.readableBytes == 0, "\(uri)")
            }
            _ = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON(), ["id": 1]]))
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(metrics.status == .ok)
            let text = String(buffer: metrics.body)
            #expect(text.contains(#"crashguard_reports_total{outcome="accepted"} 1"#))
            #expect(text.contains(#"crashguard_reports_total{outcome="rejected"} 1"#))
            #expect(text.contains("crashguard_ingest_commit_seconds"))
            #expect(text.contains("crashguard_http_requests_total"))
            let unknown = try await client.execute(uri: "/nowhere", method: .get)
            #expect(unknown.status == .notFound)
            #expect(unknown.errorMessage != nil)
        }
    }
}

/// Reports that hold every kind of value each column keeps apart (NULL, empty, escapes), sent
/// through `POST /v1/reports` and read back through the API and the columns themselves.
private struct RoundTrip {
    let sent: [TestReport]

    init() {
        let tricky = [
            "quote \" backslash \\ slash / \\\" \\\\", String((1..<0x20).map { Character(Unicode.Scalar(UInt8($0))) }),
            "ü 漢字 🚀 \u{7F} \u{85} \u{2028} \u{2029} \u{FEFF} e\u{301}", "", "\\u0041 is not A", "</script>{\"k\": [1]}",
        ]
        let at = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3600).rounded(.down))
        let fingerprint = ["round trip", tricky[0], tricky[2]]
        func report(_ n: Int, _ fields: [String: Any]) -> [String: Any] {
            var r = reportJSON(timestamp: at.addingTimeInterval(Double(n)), extra: ["fingerprint": fingerprint])
            r.removeValue(forKey: "device")
            for (key, value) in fields { r[key] = value }
            return r
        }
        sent = [
            // Nothing optional: NULL in every nullable column.
            report(0, [:]),
            // Every optional field present and empty where the contract allows it.
            report(
                1,
                [
                    "device": ["os": "", "osVersion": "", "model": "", "id": ""], "stack": [], "context": [:], "fatal": false,
                    "app": ["id": "com.example.demo", "version": "1.0.0", "build": "b\"1\\"],
                ]),
            // Some device fields NULL, some empty, some set.
            report(2, ["device": ["os": "iOS", "id": ""], "fatal": true]),
            report(3, ["device": ["osVersion": tricky[2], "model": tricky[1]]]),
            // Escapes in every JSON column and in the text ones.
            report(
                4,
                [
                    "stack": tricky, "reason": tricky.joined(separator: "|"),
                    "context": Dictionary(uniqueKeysWithValues: tricky.enumerated().map { ("k\($0.offset) \($0.element.prefix(20))", $0.element) }),
                    "device": ["os": tricky[0], "osVersion": "17.1", "model": tricky[2], "id": tricky[1]],
                ]),
        ].map(TestReport.init(object:))
    }

    func store(_ project: ProjectCredentials, _ config: ServerConfiguration) async throws {
        try await withApp(config) { client in
            let response = try await client.ingest(key: project.ingestKey, body: batchBody(sent.map(\.object))).decode(IngestResponse.self)
            #expect(response.accepted == sent.count, "rejected: \(response.rejected)")
        }
    }

    func verify(_ project: ProjectCredentials, _ config: ServerConfiguration) async throws {
        try await withApp(config) { client in
            let list = try await client.query("/v1/projects/\(project.project)/crashes", token: project.readToken)
            let groups = list.json["groups"] as? [[String: Any]] ?? []
            #expect(groups.count == 1)
            let id = try #require(groups.first?["id"] as? String)
            let page = try await client.query("/v1/projects/\(project.project)/crashes/\(id)/reports", token: project.readToken)
            let listed = (page.json["reports"] as? [[String: Any]] ?? []).reversed().map { report in
                report.filter { $0.key != "receivedAt" }
            }
            #expect(listed.count == sent.count)
            for (got, sentReport) in zip(listed, sent.map(\.object)) {
                // Stored reports always carry their environment: `production` when none was sent.
                var want = sentReport
                if want["environment"] == nil { want["environment"] = "production" }
                // Nothing in these reports is a secret: each reads back as not scrubbed.
                want["scrubbed"] = false
                #expect(NSDictionary(dictionary: got).isEqual(to: want), "sent \(want)\ngot  \(got)")
            }
        }
        // NULL and "" are apart in the columns themselves, not only in the API's rendering.
        let columns = try await withTestDatabase(config) { db in
            try await db.client.withConnection { connection in
                let rows = try await connection.query(
                    """
                    SELECT r.os, r.os_version, r.model, r.device_id, r.app_build, r.fatal, COALESCE(r.stack, r.stack_jsonb::text), COALESCE(r.context, r.context_jsonb::text)
                    FROM reports r JOIN projects p ON p.id = r.project_id WHERE p.slug = \(project.project) ORDER BY r.ts
                    """, logger: TestEnvironment.logger)
                var out: [String] = []
                for try await row in rows.decode((String?, String?, String?, String?, String?, Bool?, String?, String?).self) {
                    out.append(
                        [row.0, row.1, row.2, row.3, row.4, row.5.map { "\($0)" }, row.6, row.7].map { $0.map { "'\($0.prefix(8))'" } ?? "NULL" }
                            .joined(separator: " "))
                }
                return out
            }
        }
        #expect(
            columns.prefix(3) == [
                "NULL NULL NULL NULL NULL NULL NULL NULL",
                "'' '' '' '' 'b\"1\\' 'false' '[]' '{}'",
                "'iOS' NULL NULL '' NULL 'true' NULL NULL",
            ])
    }

}
