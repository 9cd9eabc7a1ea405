import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
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
    static func padded(_ reports: [Any], pad: Int = 40_000) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["reports": reports, "pad": String(repeating: "x", count: pad)]))
    }

    /// Waits until the server's body budget holds what `expected` accepts
    /// (`crashguard_ingest_body_bytes_in_flight`): a slice sent is counted once the server has
    /// read it, which a fixed sleep cannot promise on a busy machine.
    static func awaitBudget(_ client: some TestClientProtocol, _ expected: (Int) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        var held = -1
        while ContinuousClock.now < deadline {
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let line = String(buffer: metrics.body).split(separator: "\n").first { $0.hasPrefix("crashguard_ingest_body_bytes_in_flight ") }
            held = line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? -1
            if expected(held) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("the body budget holds \(held) bytes")
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
            try await Self.awaitBudget(client) { $0 == 2 * held.count }
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
            try await Self.awaitBudget(client) { $0 >= 180_000 }
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

    /// A flood of large bodies cannot starve itself. Three 90 KB bodies arrive in slices
    /// (each counts twice: received, and kept by the reader). When the first one's third
    /// slice finds the budget full, it holds the most of it, so it goes past the budget and
    /// is stored; the next to need more is refused while it runs, and once it has ended the
    /// budget lets the third finish. (Before: the request that met the full budget was
    /// refused whatever it held, so at 64 connections of largest bodies almost none got
    /// through.)
    @Test func theLargestHolderGetsThroughAFullBudget() async throws {
        let project = try await makeProject()
        let ids = [UUID(), UUID(), UUID()]
        try await hostileLiveApp(Self.configuration) { client, port in
            let bodies = ids.map { Self.padded([reportJSON(id: $0)], pad: 90_000) }
            let sockets = try bodies.map { body in
                let socket = try HostileSocket(port: port)
                #expect(socket.send(hostileRequestHead(key: project.ingestKey, contentLength: body.count, extra: ["Connection: close"])))
                return socket
            }
            // Slices of 30, 30, 20 KB and the rest; each counted twice once the server has it.
            let cuts = [0, 30_000, 60_000, 80_000]
            func send(_ index: Int, _ part: Int, holding expected: Int? = nil) async throws {
                let body = bodies[index]
                let end = part + 1 < cuts.count ? cuts[part + 1] : body.count
                #expect(sockets[index].send(Array(body[cuts[part]..<end])))
                if let expected { try await Self.awaitBudget(client) { $0 == expected } }
            }
            try await send(0, 0, holding: 60_000)
            try await send(1, 0, holding: 120_000)
            try await send(2, 0, holding: 180_000)
            try await send(0, 1, holding: 240_000)  // the first holds 120 KB: 240 KB of 250
            try await send(0, 2, holding: 280_000)  // past the budget, but the largest holder
            try await send(1, 1)  // refused while the first is past the budget
            let second = await sockets[1].readUntilClosed(timeout: 10)
            #expect(HostileHTTPResponse(second.bytes)?.status == 503)
            try await send(0, 3)
            let first = await sockets[0].readUntilClosed(timeout: 10)
            #expect(HostileHTTPResponse(first.bytes)?.status == 202)
            for part in 1...3 { try await send(2, part) }
            let third = await sockets[2].readUntilClosed(timeout: 10)
            #expect(HostileHTTPResponse(third.bytes)?.status == 202)
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(Set(try await db.storedReportIDs(slug: project.project)) == [ids[0], ids[2]])
        }
    }

    @Test func budgetUnit() {
        let budget = BodyByteBudget(limit: 100)
        let a = BodyByteBudget.Reservation(budget)
        do {
            let b = BodyByteBudget.Reservation(budget)
            #expect(throws: Never.self) { try a.grow(to: 60) }
            #expect(throws: Never.self) { try b.grow(to: 40) }
            // Full: b holds less than a, so it is refused and keeps what it had.
            #expect(throws: APIError.self) { try b.grow(to: 41) }
            #expect(b.held == 40)
            #expect(budget.inUse == 100)
            // a holds the most: it may go past the budget, alone.
            #expect(throws: Never.self) { try a.grow(to: 70) }
            #expect(budget.privilegedTicket == a.ticket)
            #expect(budget.inUse == 110)
            let c = BodyByteBudget.Reservation(budget)
            #expect(throws: APIError.self) { try c.grow(to: 1) }
            #expect(throws: Never.self) { try a.grow(to: 90) }
            withExtendedLifetime((b, c)) {}
        }
        // b and c ended: what they held came back; a stays past the budget until it ends.
        #expect(budget.inUse == 90)
        #expect(budget.privilegedTicket == a.ticket)
        // Closed to others while a is past it, even where there is room.
        let d = BodyByteBudget.Reservation(budget)
        #expect(throws: APIError.self) { try d.grow(to: 10) }
        withExtendedLifetime(a) {}
    }

    @Test func budgetComesBackWhenThePrivilegedRequestEnds() {
        let budget = BodyByteBudget(limit: 100)
        do {
            let a = BodyByteBudget.Reservation(budget)
            #expect(throws: Never.self) { try a.grow(to: 150) }  // alone: the largest holder
            #expect(budget.privilegedTicket == a.ticket)
        }
        #expect(budget.inUse == 0)
        #expect(budget.privilegedTicket == nil)
        let b = BodyByteBudget.Reservation(budget)
        #expect(throws: Never.self) { try b.grow(to: 100) }
        #expect(budget.privilegedTicket == nil)
        withExtendedLifetime(b) {}
    }
}
