import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Issue 13, "slow clients cannot starve others": uploads that trickle their bodies hold
/// only the upload share of the request slots, no database connection, and no connection
/// once refused, so queries, health checks and the dashboard keep answering. A live server
/// on 127.0.0.1, raw sockets, the test PostgreSQL.
@Suite(.serialized) struct SlowSenderTests {
    @Test func slowSendersFillOnlyTheUploadShareWhileQueriesAnswer() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration {
            $0.maxConcurrentRequests = 8
            $0.ingestShare = 0.5  // 4 upload slots, 4 for everything else
            // The test client and 4 held uploads leave 3 connections for the queries below,
            // if refused senders let go of theirs.
            $0.maxConnections = 8
            // Fewer than the slow senders: they must hold no database connection while they trickle.
            $0.databasePoolSize = 2
            $0.readTimeout = .seconds(8)
        }
        let body = gzip(batchBody([reportJSON()]))
        let head = hostileRequestHead(key: project.ingestKey, contentLength: body.count, encoding: "gzip")
        try await hostileLiveApp(config) { client, port in
            // The test client's keep-alive connection is open before the senders come.
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)
            // As many slow senders as the whole limit, and one more. Each sends its head, then
            // 4 bytes a second of a valid gzip body (it would need over a minute), whatever
            // the server answers.
            let senders = try (0...config.maxConcurrentRequests).map { _ in try HostileSocket(port: port) }
            let started = ContinuousClock.now
            for sender in senders { #expect(sender.send(head)) }
            let trickle = Task.detached {
                for byte in body {
                    for sender in senders { _ = sender.send([byte]) }
                    try? await Task.sleep(for: .milliseconds(250))
                    if Task.isCancelled { return }
                }
            }
            defer { trickle.cancel() }

            // Refused senders are answered at once and lose their connection within the
            // linger (2 s) although they keep sending; the others hold their slots.
            let outcomes = await withTaskGroup(of: (Int, [UInt8], Bool).self) { group in
                for (index, sender) in senders.enumerated() {
                    group.addTask {
                        let (bytes, closed) = await sender.readUntilClosed(timeout: 4)
                        return (index, bytes, closed)
                    }
                }
                var out: [(Int, [UInt8], Bool)] = []
                for await outcome in group { out.append(outcome) }
                return out
            }
            let held = outcomes.filter { $0.1.isEmpty && !$0.2 }.map(\.0)
            #expect(held.count == 4, "slow senders holding a slot: \(held.count), the upload share is 4")
            for (_, bytes, closed) in outcomes where !bytes.isEmpty {
                let response = HostileHTTPResponse(bytes)
                #expect(response?.status == 503, "\(String(decoding: bytes, as: UTF8.self))")
                #expect(response?.headers["retry-after"] == "1")
                #expect(response?.headers["connection"] == "close")
                #expect(closed, "a refused slow sender keeps no connection")
            }

            // Queries, health and the dashboard's sign-in page answer, on new connections.
            let query = try await hostileExchange(
                port: port,
                head: "GET /v1/projects/\(project.project)/crashes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + "Authorization: Bearer \(project.readToken)\r\nConnection: close\r\n\r\n")
            #expect(query?.status == 200, "\(query?.body ?? "no answer")")
            #expect(query?.body.contains("\"groups\"") == true)
            let health = try await hostileExchange(port: port, head: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            #expect(health?.status == 200)
            let signIn = try await hostileExchange(port: port, head: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            #expect(signIn?.status == 200)
            #expect(signIn?.body.contains("name=\"token\"") == true)
            let kept = try await client.execute(
                uri: "/v1/projects/\(project.project)/crashes", method: .get, headers: [.authorization: "Bearer \(project.readToken)"])
            #expect(kept.status == .ok)
            // One more upload is refused with Retry-After.
            let more = try await hostileExchange(
                port: port,
                head: hostileRequestHead(key: project.ingestKey, contentLength: body.count, encoding: "gzip", extra: ["Connection: close"]),
                body: body)
            #expect(more?.status == 503)
            #expect(more?.headers["retry-after"] == "1")
            #expect(more?.errorMessage?.contains("concurrent uploads") == true, "\(more?.body ?? "no answer")")
            #expect(ContinuousClock.now - started < .seconds(8), "the checks ran while the slow senders held their slots")

            // The read timeout cuts the slow senders off (408); then the server serves as before.
            for index in held {
                let (bytes, closed) = await senders[index].readUntilClosed(timeout: 10)
                #expect(HostileHTTPResponse(bytes)?.status == 408)
                #expect(closed)
            }
            let accepted = try await client.ingest(key: project.ingestKey, body: batchBody([reportJSON()]))
            #expect(accepted.status == .accepted)
            let metrics = try await client.execute(uri: "/metrics", method: .get)
            #expect(String(buffer: metrics.body).contains(#"crashguard_requests_in_flight{pool="uploads"} 0"#))
        }
        try await withTestDatabase { (db: CrashDatabase) async throws in
            #expect(try await db.storedReportIDs(slug: project.project).count == 1, "nothing of a slow sender is stored")
        }
    }
}
