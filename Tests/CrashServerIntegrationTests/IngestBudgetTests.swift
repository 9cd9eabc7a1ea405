import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The server-wide budget of body bytes in flight, shared fairly (hardening.md, "The byte
/// budget is shared fairly"): no request and no project holds more than half of it; past its
/// share a request gets 503 with `Retry-After` and stores nothing; what a request held is
/// given back when it ends.
@Suite struct IngestBudgetTests {
    /// One largest request (100 KB received + 100 KB decoded) fits in a project's half
    /// (200 KB of 400 KB).
    static var configuration: ServerConfiguration {
        TestEnvironment.configuration {
            $0.maxBodyBytes = 100_000
            $0.maxDecompressedBytes = 100_000
            $0.maxInflightBodyBytes = 400_000
            $0.readTimeout = .seconds(10)
        }
    }

    /// A batch of `reports` with 40 KB more that the reader keeps (in a member it ignores:
    /// white space between tokens would not be kept, so it would not count).
    static func padded(_ reports: [Any], pad: Int = 40_000) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["reports": reports, "pad": String(repeating: "x", count: pad)]))
    }

    /// A request the budget refuses, sent on a connection of its own: the refusal closes its
    /// connection (`Connection: close`), which must not be the test client's, whose next
    /// request would race that close.
    static func refusal(port: Int, key: String, body: [UInt8]) async throws -> HostileHTTPResponse? {
        try await hostileExchange(port: port, head: hostileRequestHead(key: key, contentLength: body.count), body: body)
    }

    /// Waits until the server's body budget holds what `expected` accepts
    /// (`crashguard_ingest_body_bytes_in_flight`): a slice sent is counted once the server has
    /// read it, which a fixed sleep cannot promise on a busy machine.
    static func awaitBudget(_ client: some TestClientProtocol, _ expected: (Int) -> Bool) async throws {
        try await awaitMetric(client, "crashguard_ingest_body_bytes_in_flight", expected)
    }

    /// Waits until the server's gauge `name` shows what `expected` accepts.
    static func awaitMetric(_ client: some TestClientProtocol, _ name: String, _ expected: (Int) -> Bool) async throws {
        var value = -1
        do {
            try await waitUntil("\(name) is \(value)") {
                let metrics = try await client.execute(uri: "/metrics", method: .get)
                let line = String(buffer: metrics.body).split(separator: "\n").first { $0.hasPrefix(name + " ") }
                value = line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? -1
                return expected(value)
            }
        } catch let failure as TestFailure {
            // Recorded, not thrown: the caller goes on to end what holds the budget.
            Issue.record("\(failure)")
        }
    }

    /// A project's request past its project's half is refused (503, `Retry-After`, nothing
    /// stored) while a smaller one of the same project still fits; once the holder ends, its
    /// share comes back.
    @Test func requestsPastTheirProjectsHalfGet503AndTheBudgetComesBack() async throws {
        let project = try await makeProject()
        let id = UUID()
        try await hostileLiveApp(Self.configuration) { client, port in
            // A slow sender holds ~180 KB of its project's 200 KB: 90 KB sent of a 90,001-byte body.
            let holder = try HostileSocket(port: port)
            let opening = Array(#"{"reports":[""#.utf8)
            let held = opening + [UInt8](repeating: 0x78, count: 90_000 - opening.count)
            #expect(holder.send(hostileRequestHead(key: project.ingestKey, contentLength: held.count + 1, extra: ["Connection: close"])))
            #expect(holder.send(held))
            try await Self.awaitBudget(client) { $0 >= 2 * held.count }
            // 40 KB more (80 KB of budget) would take the project past its 200 KB: refused, not stored.
            let padded = Self.padded([reportJSON(id: id)])
            let refused = try await Self.refusal(port: port, key: project.ingestKey, body: padded)
            #expect(refused?.status == 503)
            #expect(refused?.headers["retry-after"] == "1")
            #expect(refused?.errorMessage?.contains("in flight") == true)
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

    /// The Sentry routes read bodies under the same budget as `/v1/reports`: a slow
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
            let refusedV1 = try await Self.refusal(port: port, key: project.ingestKey, body: v1)
            #expect(refusedV1?.status == 503)
            #expect(refusedV1?.errorMessage?.contains("in flight") == true)
            let sentryHead =
                [
                    "POST \(uri) HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-sentry-envelope",
                    "X-Sentry-Auth: Sentry sentry_version=7, sentry_key=\(project.ingestKey)", "Content-Length: \(paddedEnvelope.count)",
                ].joined(separator: "\r\n") + "\r\n\r\n"
            let refused = try await hostileExchange(port: port, head: sentryHead, body: paddedEnvelope)
            #expect(refused?.status == 429)
            #expect(refused?.headers["retry-after"] == "1")
            #expect(refused?.headers[SentryController.rateLimitsHeader.canonicalName] == "1::organization")
            let detail = refused.flatMap { try? JSONSerialization.jsonObject(with: Data($0.body.utf8)) as? [String: Any] }?["detail"]
            #expect((detail as? String)?.contains("in flight") == true)
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

    /// While one project's uploads fill its half and stall, another project's valid report
    /// is answered 202 at once (within 1 s, no retry needed). Two stalled uploads of project A
    /// would hold 360 KB of the 400 KB: the second is refused at A's half (200 KB), so the
    /// other half stays free, and B's 80 KB request is read and stored.
    @Test func anotherProjectIsServedWhileOneProjectsUploadsStall() async throws {
        let stalled = try await makeProject()
        let other = try await makeProject()
        let id = UUID()
        try await hostileLiveApp(Self.configuration) { client, port in
            let opening = Array(#"{"reports":[""#.utf8)
            let part = opening + [UInt8](repeating: 0x78, count: 90_000 - opening.count)
            let first = try HostileSocket(port: port)
            #expect(first.send(hostileRequestHead(key: stalled.ingestKey, contentLength: part.count + 1, extra: ["Connection: close"])))
            #expect(first.send(part))
            try await Self.awaitBudget(client) { $0 >= 2 * part.count }
            let second = try HostileSocket(port: port)
            #expect(second.send(hostileRequestHead(key: stalled.ingestKey, contentLength: part.count + 1, extra: ["Connection: close"])))
            #expect(second.send(part))
            let refused = await second.readResponse(timeout: 10)
            #expect(refused?.status == 503, "a project's second stalled upload is refused at its half")
            #expect(refused?.headers["retry-after"] == "1")
            #expect(refused?.errorMessage?.contains("half") == true, "\(refused?.body ?? "no answer")")
            try await Self.awaitBudget(client) { $0 >= 2 * part.count }
            // Project A holds its half and stalls; B's report (80 KB of budget) goes through at once.
            let started = ContinuousClock.now
            let accepted = try await client.ingest(key: other.ingestKey, body: Self.padded([reportJSON(id: id)]), encoding: "identity")
            #expect(accepted.status == .accepted)
            #expect(ContinuousClock.now - started < .seconds(1))
            let sentry = try await client.sentry(
                "/api/\(other.sentryId)/envelope/", headers: SentryIngestTests.auth(other.ingestKey),
                body: SentryIngestTests.eventEnvelope(SentryIngestTests.event()))
            #expect(sentry.status == .ok)
            withExtendedLifetime(first) {}
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: other.project).count == 2)
            #expect(try await db.storedReportIDs(slug: stalled.project).isEmpty)
        }
    }

    /// A busy project's requests queue behind its own commits instead of being refused: while
    /// two requests read whole (70 KB decoded each) wait for their commit behind a lock, a third
    /// that would take the project past its 200 KB half waits for their bytes (it is not
    /// answered 503), and all three are stored once the commit goes through. A request that
    /// would wait for a client still sending (the stalled holders above) is still refused at once.
    @Test func aRequestWaitsForTheBytesOfItsProjectsCommitsInsteadOf503() async throws {
        let project = try await makeProject()
        let config = Self.configuration
        let ids = [UUID(), UUID(), UUID()]
        let bodies = ids.map { gzip(Self.padded([reportJSON(id: $0)], pad: 70_000)) }
        try await hostileLiveApp(config) { client, port in
            // A first report makes the group whose row the lock below holds.
            #expect(try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let key = project.ingestKey
            @Sendable func send(_ body: [UInt8]) -> Task<HostileHTTPResponse?, any Error> {
                Task {
                    try await hostileExchange(port: port, head: hostileRequestHead(key: key, contentLength: body.count, encoding: "gzip"), body: body)
                }
            }
            let requests = try await withGroupRowsLocked(config, slug: project.project) { db in
                let committing = [send(bodies[0]), send(bodies[1])]
                try await Self.awaitBudget(client) { $0 >= 140_000 }
                try await waitUntil("an ingest transaction waits on the group's row lock") {
                    try await db.ingestTransactionsWaitingOnLocks() > 0
                }
                // The third would hold about 70 KB more: past the half, which the two committing hold.
                let third = send(bodies[2])
                try await Self.awaitMetric(client, "crashguard_ingest_body_waiting") { $0 == 1 }
                #expect(try await db.storedReportIDs(slug: project.project).count == 1)
                return committing + [third]
            }
            for request in requests {
                let response = try await request.value
                #expect(response?.status == 202, "\(response?.body ?? "no answer")")
            }
            try await Self.awaitBudget(client) { $0 == 0 }
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 4)
        }
    }

    /// A request that holds nothing yet waits for room before it reads its body instead of
    /// reading into a half that another request's body, still being received, will fill: two
    /// bodies of one project that hold 120 KB each do not fit its 200 KB half together, and
    /// the second, sent while the first is half sent, is stored after it rather than refused
    /// halfway through its body.
    @Test func aRequestThatHoldsNothingWaitsForRoomBeforeItsBody() async throws {
        let project = try await makeProject()
        let ids = [UUID(), UUID()]
        let bodies = ids.map { Self.padded([reportJSON(id: $0)], pad: 60_000) }
        try await hostileLiveApp(Self.configuration) { client, port in
            let first = try HostileSocket(port: port)
            #expect(first.send(hostileRequestHead(key: project.ingestKey, contentLength: bodies[0].count)))
            #expect(first.send(Array(bodies[0][..<50_000])))
            try await Self.awaitBudget(client) { $0 >= 2 * bodies[0].count }
            let key = project.ingestKey
            let second = Task {
                try await hostileExchange(port: port, head: hostileRequestHead(key: key, contentLength: bodies[1].count), body: bodies[1])
            }
            try await Self.awaitMetric(client, "crashguard_ingest_body_waiting") { $0 == 1 }
            #expect(first.send(Array(bodies[0][50_000...])))
            #expect(await first.readResponse(timeout: 10)?.status == 202)
            let response = try await second.value
            #expect(response?.status == 202, "\(response?.body ?? "no answer")")
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(Set(try await db.storedReportIDs(slug: project.project)) == Set(ids))
        }
    }

    /// A stalled body is cut off by the read timeout and gives back what it held.
    @Test func aStalledBodyGivesItsShareBackAtTheReadTimeout() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.maxBodyBytes = 100_000
            $0.maxDecompressedBytes = 100_000
            $0.maxInflightBodyBytes = 400_000
            $0.readTimeout = .seconds(2)
        }
        try await hostileLiveApp(config) { client, port in
            let opening = Array(#"{"reports":[""#.utf8)
            let part = opening + [UInt8](repeating: 0x78, count: 90_000 - opening.count)
            let holder = try HostileSocket(port: port)
            #expect(holder.send(hostileRequestHead(key: project.ingestKey, contentLength: part.count + 1)))
            #expect(holder.send(part))
            try await Self.awaitBudget(client) { $0 >= 2 * part.count }
            let (bytes, closed) = await holder.readUntilClosed(timeout: 10)
            #expect(HostileHTTPResponse(bytes)?.status == 408)
            #expect(closed)
            try await Self.awaitBudget(client) { $0 == 0 }
        }
    }

    @Test func noRequestAndNoProjectHoldsMoreThanHalf() {
        let budget = BodyByteBudget(limit: 100)
        let a = BodyByteBudget.Reservation(budget, project: 1)
        #expect(throws: Never.self) { try a.grow(to: 50) }
        // Past its own half: refused, keeps what it had.
        #expect(throws: APIError.self) { try a.grow(to: 51) }
        #expect(a.held == 50)
        // Another request of the same project: past the project's half.
        let b = BodyByteBudget.Reservation(budget, project: 1)
        #expect(throws: APIError.self) { try b.grow(to: 1) }
        #expect(b.held == 0)
        // Another project has the other half, and no more: never past the whole budget.
        let c = BodyByteBudget.Reservation(budget, project: 2)
        #expect(throws: Never.self) { try c.grow(to: 30) }
        let d = BodyByteBudget.Reservation(budget, project: 3)
        #expect(throws: Never.self) { try d.grow(to: 20) }
        #expect(budget.inUse == 100)
        #expect(throws: APIError.self) { try d.grow(to: 21) }
        #expect(budget.inUse(by: .project(1)) == 50)
        // A shrinking share gives bytes back to everyone (debug-file bytes written to disk).
        a.shrink(to: 40)
        #expect(throws: Never.self) { try d.grow(to: 25) }
        #expect(throws: Never.self) { try b.grow(to: 5) }
        #expect(budget.inUse == 100)
        withExtendedLifetime((a, b, c, d)) {}
    }

    @Test func sharesComeBackWhenRequestsEnd() {
        let budget = BodyByteBudget(limit: 100)
        do {
            let a = BodyByteBudget.Reservation(budget, project: 1)
            #expect(throws: Never.self) { try a.grow(to: 50) }
            let b = BodyByteBudget.Reservation(budget, project: 2)
            #expect(throws: Never.self) { try b.grow(to: 50) }
            #expect(budget.openNow == 2)
        }
        #expect(budget.inUse == 0)
        #expect(budget.openNow == 0)
        #expect(budget.inUse(by: .project(1)) == 0)
        let c = BodyByteBudget.Reservation(budget, project: 1)
        #expect(throws: Never.self) { try c.grow(to: 50) }
        withExtendedLifetime(c) {}
    }

    /// A request being read waits for a settled request's bytes (a body read whole, its
    /// commit under way) and takes them once they come back; it does not wait for bytes a
    /// request still being read holds, and it waits no longer than `maxWait`. Each refusal is
    /// counted by reason.
    @Test func aGrowingRequestWaitsOnlyForSettledBytes() async throws {
        let budget = BodyByteBudget(limit: 100, maxWait: .seconds(60))
        var settled: BodyByteBudget.Reservation? = BodyByteBudget.Reservation(budget, project: 1)
        try settled?.grow(to: 40)
        settled?.settle(holding: 40, received: 40)
        let reading = BodyByteBudget.Reservation(budget, project: 1)
        try reading.grow(to: 5)
        // Past the project's half, the missing bytes held by the settled request: it waits.
        let waiter = Task {
            let share = BodyByteBudget.Reservation(budget, project: 1)
            try await share.growWaiting(to: 20)
            return share.held
        }
        while budget.waitingNow == 0 { await Task.yield() }
        // A request that holds bytes, with more missing from the half (46 + 45 - 50 = 41)
        // than settled requests hold (40): refused at once.
        let other = BodyByteBudget.Reservation(budget, project: 1)
        try other.grow(to: 1)
        await #expect(throws: APIError.self) { try await other.growWaiting(to: 46) }
        other.release()
        settled = nil
        #expect(try await waiter.value == 20)
        #expect(budget.inUse(by: .project(1)) == 5)
        #expect(budget.waitingNow == 0)

        // Missing bytes held by a request still being read: refused at once, however long it may wait.
        try reading.grow(to: 44)
        let late = BodyByteBudget.Reservation(budget, project: 1)
        try late.grow(to: 1)
        await #expect(throws: APIError.self) { try await late.growWaiting(to: 10) }

        // Settled bytes that do not come back within maxWait: refused after it.
        let quick = BodyByteBudget(limit: 100, maxWait: .milliseconds(50))
        let holder = BodyByteBudget.Reservation(quick, project: 2)
        try holder.grow(to: 50)
        holder.settle(holding: 50, received: 50)
        let impatient = BodyByteBudget.Reservation(quick, project: 2)
        await #expect(throws: APIError.self) { try await impatient.growWaiting(to: 1) }
        #expect(quick.refusals.counts == ["wait": 1])
        #expect(budget.refusals.counts == ["project": 2])
        withExtendedLifetime((reading, late, holder)) {}
    }

    /// Bytes read before the key is known hold at most a quarter, and move to the project once
    /// it is: into its half, or refused.
    @Test func unidentifiedBytesMoveToTheirProject() {
        let budget = BodyByteBudget(limit: 100)
        let a = BodyByteBudget.Reservation(budget, project: nil)
        #expect(throws: Never.self) { try a.grow(to: 20) }
        let b = BodyByteBudget.Reservation(budget, project: nil)
        #expect(throws: APIError.self) { try b.grow(to: 6) }
        #expect(throws: Never.self) { try a.assign(to: 7) }
        #expect(budget.inUse(by: .unidentified) == 0)
        #expect(budget.inUse(by: .project(7)) == 20)
        #expect(throws: Never.self) { try a.grow(to: 50) }
        #expect(throws: Never.self) { try b.grow(to: 25) }
        // Project 7's half is full: b cannot join it.
        #expect(throws: APIError.self) { try b.assign(to: 7) }
        #expect(budget.inUse(by: .unidentified) == 25)
        #expect(throws: Never.self) { try b.assign(to: 8) }
        #expect(budget.inUse == 75)
        withExtendedLifetime((a, b)) {}
    }
}
