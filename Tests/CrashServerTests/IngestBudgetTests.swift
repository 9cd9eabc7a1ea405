import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing

@testable import CrashServer

/// The server-wide budget of body bytes in flight (issue 13): past it, 503 with
/// `Retry-After` and nothing stored; what a request held is given back when it ends.
@Suite struct IngestBudgetTests {
    /// One largest request fits (100 KB received + 100 KB decoded), two do not.
    static var configuration: ServerConfiguration {
        TestEnvironment.configuration {
            $0.maxBodyBytes = 100_000
            $0.maxDecompressedBytes = 100_000
            $0.maxInflightBodyBytes = 250_000
            $0.readTimeout = 10
        }
    }

    /// A batch of `reports` with 40 KB more that the reader keeps (in a member it ignores:
    /// white space between tokens would not be kept, so it would not count).
    static func padded(_ reports: [Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["reports": reports, "pad": String(repeating: "x", count: 40_000)]))
    }

    @Test func requestsPastTheBudgetGet503AndTheBudgetComesBack() async throws {
        let project = try await makeProject()
        let id = UUID()
        try await hostileLiveApp(Self.configuration) { client, port in
            // A slow sender holds ~180 KB of the budget: 90 KB sent of a 90,001-byte body.
            let holder = try HostileSocket(port: port)
            let opening = Array(#"{"reports":[""#.utf8)
            let held = opening + [UInt8](repeating: 0x78, count: 90_000 - opening.count)
            #expect(holder.send(hostileRequestHead(key: project.ingestKey, contentLength: held.count + 1, extra: ["Connection: close"])))
            #expect(holder.send(held))
            try await Task.sleep(for: .milliseconds(500))
            // 40 KB more (80 KB of budget) would pass the 250 KB: refused, not stored.
            let padded = Self.padded([reportJSON(id: id)])
            let refused = try await client.ingest(key: project.ingestKey, body: padded, encoding: "identity")
            #expect(refused.status == .serviceUnavailable)
            #expect(refused.headers[.retryAfter] == "1")
            #expect(refused.errorMessage?.contains("in flight") == true)
            // A small request still fits.
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            // The holder ends (its body is not JSON): its share comes back.
            #expect(holder.send("]"))
            let (bytes, _) = await holder.readUntilClosed(timeout: 5)
            #expect(HostileHTTPResponse(bytes)?.status == 400)
            let retried = try await client.ingest(key: project.ingestKey, body: padded, encoding: "identity")
            #expect(retried.status == .accepted)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 2)
        }
    }

    /// The Sentry routes read bodies under the same budget (they used to take none): a slow
    /// Sentry upload holds its share from `/v1/reports`, and a Sentry request past the budget
    /// gets Sentry's answer for "come back later", 429 with `Retry-After` and
    /// `X-Sentry-Rate-Limits`, and stores nothing.
    @Test func theSentryDoorReadsUnderTheSameBudget() async throws {
        let project = try await makeProject()
        var padded = SentryIngestTests.event()
        padded["extra"] = ["pad": String(repeating: "x", count: 40_000)]
        let paddedEnvelope = SentryIngestTests.eventEnvelope(padded)
        let uri = "/api/\(project.sentryId)/envelope/"
        try await hostileLiveApp(Self.configuration) { client, port in
            // A slow Sentry upload holds ~180 KB of the budget: 90 KB sent of a 90,001-byte body.
            let holder = try HostileSocket(port: port)
            let head =
                [
                    "POST \(uri) HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-sentry-envelope",
                    "X-Sentry-Auth: Sentry sentry_version=7, sentry_key=\(project.ingestKey)", "Content-Length: 90001",
                    "Connection: close",
                ].joined(separator: "\r\n") + "\r\n\r\n"
            #expect(holder.send(head))
            #expect(holder.send([UInt8](repeating: 0x20, count: 90_000)))
            try await Task.sleep(for: .milliseconds(500))
            let v1 = Self.padded([reportJSON()])
            let refusedV1 = try await client.ingest(key: project.ingestKey, body: v1, encoding: "identity")
            #expect(refusedV1.status == .serviceUnavailable)
            #expect(refusedV1.errorMessage?.contains("in flight") == true)
            let refused = try await client.sentry(uri, headers: SentryIngestTests.auth(project.ingestKey), body: paddedEnvelope)
            #expect(refused.status == .tooManyRequests)
            #expect(refused.headers[.retryAfter] == "1")
            #expect(refused.headers[SentryController.rateLimitsHeader] == "1::organization")
            #expect((try? refused.json()["detail"] as? String)?.contains("in flight") == true)
            // The holder ends (its body is no envelope): its share comes back.
            #expect(holder.send("}"))
            let (bytes, _) = await holder.readUntilClosed(timeout: 5)
            #expect(HostileHTTPResponse(bytes)?.status == 400)
            let retried = try await client.sentry(uri, headers: SentryIngestTests.auth(project.ingestKey), body: paddedEnvelope)
            #expect(retried.status == .ok)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1)
        }
    }

    @Test func budgetUnit() {
        let budget = BodyByteBudget(limit: 100)
        #expect(budget.reserve(60))
        #expect(!budget.reserve(41))
        #expect(budget.inUse == 60)
        do {
            let share = BodyByteBudget.Reservation(budget)
            #expect(throws: Never.self) { try share.grow(to: 40) }
            #expect(throws: APIError.self) { try share.grow(to: 41) }
            #expect(share.held == 40)
        }
        #expect(budget.inUse == 60)
        budget.release(60)
        #expect(budget.inUse == 0)
    }
}
