@testable import CrashServer
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Testing

/// PostgreSQL's own timeouts end an ingest transaction stuck behind a lock before the
/// server's deadline does: the 503 means rolled back, for that request only.
@Suite(.serialized) struct DatabaseTimeoutTests {
    @Test func lockHeldPastTheDeadlineIs503NothingStoredAndDatabaseStaysUp() async throws {
        // Deadline 4 s: the ingest transaction's lock_timeout / statement_timeout are 2 s.
        let config = TestEnvironment.configuration { $0.databaseTimeout = 4 }
        let blocked = try await makeProject(config)
        let other = try await makeProject(config)
        let id = UUID()
        let body = batchBody([reportJSON(id: id)])
        try await withApp(config) { client in
            try await withTestDatabase(config) { db in
                // Another session holds the ledger's lock longer than the deadline.
                try await db.client.withTransaction(logger: TestEnvironment.logger) { connection in
                    try await connection.query("LOCK TABLE report_ids IN ACCESS EXCLUSIVE MODE", logger: TestEnvironment.logger)
                    let refused = try await client.ingest(key: blocked.ingestKey, body: body)
                    #expect(refused.status == .serviceUnavailable)
                    #expect(refused.headers[.retryAfter].flatMap(Int.init) != nil)
                    #expect(refused.errorMessage?.contains("busy") == true)
                    #expect(refused.errorMessage?.contains("unreachable") == false)
                    // Hold the lock past the server's deadline too.
                    try await Task.sleep(for: .seconds(3))
                    #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
                }
                // Lock released: other projects are served at once, not told "unreachable".
                let elsewhere = try await client.ingest(key: other.ingestKey, body: batchBody([reportJSON()]))
                #expect(elsewhere.status == .accepted)
                #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
                // Nothing of the refused request commits later.
                try await Task.sleep(for: .seconds(1))
                #expect(try await db.storedReportIDs(slug: blocked.project).isEmpty)

                let retry = try await client.ingest(key: blocked.ingestKey, body: body)
                #expect(retry.status == .accepted)
                #expect(try retry.decode(IngestResponse.self).accepted == 1)
                let again = try await client.ingest(key: blocked.ingestKey, body: body)
                #expect(again.status == .accepted)
                #expect(try again.decode(IngestResponse.self).duplicates == 1)
                #expect(try await db.storedReportIDs(slug: blocked.project) == [id])
            }
        }
    }
}
