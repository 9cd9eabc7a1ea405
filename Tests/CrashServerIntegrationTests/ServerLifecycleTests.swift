import AsyncHTTPClient
import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Whole-process behaviour: a database that goes away and comes back, and SIGTERM.
@Suite(.serialized) struct ServerLifecycleTests {
    @Test func databaseOutageIs503ThenRecovers() async throws {
        // Below the ephemeral range (32768-60999): while the cluster is down, a reconnecting
        // client must not be able to connect to itself on this port (TCP self-connect).
        let cluster = PrivateCluster(port: 29_331)
        try await cluster.start("crashguard_outage")
        let url = try await cluster.url("crashguard_outage")
        let config = TestEnvironment.configuration {
            $0.databaseURL = url
            $0.databaseTimeout = .seconds(3)
        }
        // A cluster that has just started may still reset the first connections.
        let project = try await retrying { try await makeProject(config) }
        let state = LoadState()
        try await withApp(config) { client in
            let first = (0..<5).map { _ in UUID() }
            let ok = try await client.ingest(key: project.ingestKey, body: batchBody(first.map { reportJSON(id: $0) }))
            #expect(ok.status == .accepted)
            state.acknowledged.withLock { $0.formUnion(first) }

            try await cluster.stop()
            let during = (0..<5).map { _ in UUID() }
            let body = batchBody(during.map { reportJSON(id: $0) })
            let refused = try await client.ingest(key: project.ingestKey, body: body)
            #expect(refused.status == .serviceUnavailable)
            #expect(refused.headers[.retryAfter].flatMap(Int.init) != nil)
            #expect(refused.errorMessage?.contains("database") == true)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .serviceUnavailable)
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)

            try await cluster.start()
            // Retried like a client would, until acknowledged (the contract allows 60 s).
            var recovered = false
            for _ in 0..<120 {
                let retry = try await client.ingest(key: project.ingestKey, body: body)
                if retry.status == .accepted {
                    let r = try retry.decode(IngestResponse.self)
                    #expect(r.accepted + r.duplicates == during.count)
                    state.acknowledged.withLock { $0.formUnion(during) }
                    recovered = true
                    break
                }
                #expect(retry.status == .serviceUnavailable)
                try await Task.sleep(for: .milliseconds(500))
            }
            #expect(recovered)
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .ok)
        }
        let stored = try await retrying { try await withTestDatabase(config) { try await $0.storedReportIDs(slug: project.project) } }
        #expect(Set(stored) == state.acknowledged.withLock { $0 })
        #expect(stored.count == 10)
        try await cluster.stop()
    }

    @Test func sigtermCommitsEverythingAcknowledgedAndExitsZero() async throws {
        let project = try await makeProject()
        let server = try await ServerProcess(
            arguments: ["--rate-limit", "0"], environment: ["DATABASE_URL": TestEnvironment.databaseURL])
        let state = LoadState()
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    while !state.stop.withLock({ $0 }) {
                        let ids = (0..<10).map { _ in UUID() }
                        let (status, _) = await post(
                            client, url: server.baseURL, key: project.ingestKey, body: batchBody(ids.map { reportJSON(id: $0) }))
                        if status == 202 { state.acknowledged.withLock { $0.formUnion(ids) } }
                        if status == 0 { try await Task.sleep(for: .milliseconds(20)) }
                    }
                }
            }
            // Let traffic flow, then ask the server to stop while requests are in flight.
            try await waitUntil("200 reports acknowledged") { state.acknowledged.withLock { $0.count } >= 200 }
            let status = await server.terminate()
            state.stop.withLock { $0 = true }
            try await group.waitForAll()
            #expect(status == 0)
        }
        try await client.shutdown()
        let stored = Set(try await withTestDatabase { try await $0.storedReportIDs(slug: project.project) })
        let acked = state.acknowledged.withLock { $0 }
        #expect(acked.count >= 200)
        #expect(acked.isSubset(of: stored), "acknowledged but missing: \(acked.subtracting(stored).count)")
    }
}

/// Shared state of concurrent test clients.
final class LoadState: Sendable {
    /// Ids that got a 202.
    let acknowledged = Mutex<Set<UUID>>([])
    /// Set when clients should stop.
    let stop = Mutex(false)
}

/// Runs `body` until it succeeds, for up to `seconds`; rethrows the last error.
func retrying<T: Sendable>(seconds: Double = 30, _ body: () async throws -> T) async throws -> T {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while true {
        do {
            return try await body()
        } catch {
            guard ContinuousClock.now < deadline else { throw error }
            try await Task.sleep(for: .milliseconds(500))
        }
    }
}
