import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import PostgresNIO
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The contract's hardening rules for webhooks, end to end: a real server with its sender,
/// real PostgreSQL, and receivers on 127.0.0.1 that hang or sit behind a refused name. Part of
/// the serialized "Webhooks" suite: every app's sender claims any due delivery of the
/// database, so these must not run beside the other webhook tests.
extension WebhookTests {
    /// The `lastDelivery` of the webhook `id` in `hooks`.
    static func lastDelivery(_ hooks: [[String: Any]], _ id: String) -> [String: Any]? {
        hooks.first { $0["id"] as? String == id }?["lastDelivery"] as? [String: Any]
    }

    @Test(
        "a receiver that sends its head and hangs fails with 'timeout' at the 10 s deadline; another webhook's events are delivered within 10 s meanwhile"
    )
    func hangingReceiverTimesOut() async throws {
        let p = try await makeProject()
        let hanging = try HostileReceiver(.headThenHang(status: 200))
        let receiver = try await WebhookReceiver.start()
        var configuration = Self.configuration()
        configuration.webhooks.timeout = WebhookSettings().timeout  // the contract's 10 s
        try await withApp(configuration) { client in
            let hang = try await client.createWebhook(p, url: hanging.url, events: ["group.new"])
            let ok = try await client.createWebhook(p, url: receiver.url("ok"), events: ["group.new"])
            let start = ContinuousClock.now
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON(kind: "container")])).status == .accepted)
            try await hanging.wait(timeout: .seconds(10)) { $0.accepted >= 1 }
            _ = try await receiver.wait(for: "ok", timeout: .seconds(10))
            #expect(ContinuousClock.now - start < .seconds(10))
            // A second event while the first still hangs: delivered within 10 s all the same.
            let second = ContinuousClock.now
            let timer = batchBody([reportJSON(kind: "timer", reason: "timer fired on a deallocated target")])
            #expect(try await client.ingest(key: p.ingestKey, body: timer).status == .accepted)
            _ = try await receiver.wait(for: "ok", count: 2, timeout: .seconds(10))
            #expect(ContinuousClock.now - second < .seconds(10))

            // The hanging attempt ends at its deadline, as a timeout with no status, retried.
            let hooks = try await client.waitForWebhooks(p) { hooks in
                Self.lastDelivery(hooks, hang.id)?["error"] as? String == "timeout"
            }
            let took = ContinuousClock.now - start
            #expect(took >= .seconds(9.9) && took < .seconds(20), "\(took)")
            let last = try #require(Self.lastDelivery(hooks, hang.id))
            #expect(last["httpStatus"] is NSNull || last["httpStatus"] == nil)
            #expect(last["status"] as? String == "retrying")
            #expect(Self.lastDelivery(hooks, ok.id)?["status"] as? String == "delivered")
            // The sender closed the connection it gave up on; never more than 2 at once.
            try await hanging.wait(timeout: .seconds(5)) { $0.closedByPeer >= 1 }
            #expect(hanging.stats.maxOpen <= 2)
            hanging.stop()
            try await Self.delete(client, p, [hang.id, ok.id])
        }
        hanging.stop()
        await receiver.stop()
    }

    @Test("one webhook holds at most 2 sending slots: its other deliveries wait, other webhooks' do not")
    func twoSlotsPerWebhook() async throws {
        let p = try await makeProject()
        let busy = try HostileReceiver(.silent)
        let receiver = try await WebhookReceiver.start()
        try await withApp(Self.configuration()) { client in
            let slow = try await client.createWebhook(p, url: busy.url, events: ["group.new"])
            let ok = try await client.createWebhook(p, url: receiver.url("ok"), events: ["group.new"])
            // Six new groups in one batch: six deliveries for each webhook, all due at once.
            let reports = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"].map {
                reportJSON(kind: "custom", reason: "slot test failure in \($0)")
            }
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody(reports)).status == .accepted)
            _ = try await receiver.wait(for: "ok", count: 6, timeout: .seconds(10))
            try await busy.wait(timeout: .seconds(10)) { $0.accepted >= 2 }
            // Many polls (every 0.05 s) pass with 8 free slots; the busy webhook gets no third.
            try await Task.sleep(for: .seconds(1.5))
            #expect(busy.stats.accepted == 2)
            #expect(busy.stats.maxOpen == 2)
            let leased = try await withTestDatabase { db in try await db.leasedDeliveries(webhook: slow.id) }
            #expect(leased == 2)
            busy.stop()
            try await Self.delete(client, p, [slow.id, ok.id])
        }
        busy.stop()
        await receiver.stop()
    }

    @Test("a name that resolves to loopback is not connected to: 'address not allowed', no status, retried; the allow list lets it through")
    func nameResolvingToLoopback() async throws {
        // The machine's own name: /etc/hosts maps it to 127.0.x.x, ::1 or the host's private
        // address, all refused.
        var buffer = [CChar](repeating: 0, count: 256)
        #expect(gethostname(&buffer, buffer.count) == 0)
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let addresses = try WebhookResolver.addresses(of: name)
        try #require(!addresses.isEmpty && addresses.allSatisfy { $0.isRefused }, "\(name): \(addresses)")

        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        let url = "http://\(name):\(receiver.port)/hooks/named"
        let hookID = Mutex("")
        try await withApp(Self.configuration()) { client in
            let hook = try await client.createWebhook(p, url: url, events: ["group.new"])
            hookID.withLock { $0 = hook.id }
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let hooks = try await client.waitForWebhooks(p) { hooks in
                (Self.lastDelivery(hooks, hook.id)?["attempts"] as? Int ?? 0) >= 2
            }
            let last = try #require(Self.lastDelivery(hooks, hook.id))
            #expect(last["error"] as? String == "address not allowed")
            #expect(last["httpStatus"] is NSNull || last["httpStatus"] == nil)
            #expect(last["status"] as? String == "retrying")
            #expect(receiver.received("named").isEmpty)
        }
        // Listed by name, the same delivery goes through (when the name reaches this receiver).
        if addresses.contains(IPAddress(v4: 127, 0, 0, 1)) {
            var allowed = Self.configuration()
            allowed.webhooks.allowHosts = [name.uppercased()]
            try await withApp(allowed) { client in
                let got = try await receiver.wait(for: "named", where: { $0.answered == 200 })
                #expect(got.first?.headers["host"] == "\(name):\(receiver.port)")
                let id = hookID.withLock { $0 }
                _ = try await client.waitForWebhooks(p) { hooks in
                    Self.lastDelivery(hooks, id)?["status"] as? String == "delivered"
                }
            }
        }
        let id = hookID.withLock { $0 }
        try await withApp(Self.configuration()) { client in try await Self.delete(client, p, [id]) }
        await receiver.stop()
    }

    @Test("a TLS failure is 'connection failed', never the TLS library's message")
    func tlsFailureText() async throws {
        let p = try await makeProject()
        let receiver = try await WebhookReceiver.start()
        try await withApp(Self.configuration()) { client in
            // The receiver speaks plain HTTP: the handshake fails.
            let url = receiver.url("tls").replacingOccurrences(of: "http://", with: "https://")
            let hook = try await client.createWebhook(p, url: url, events: ["group.new"])
            #expect(try await client.ingest(key: p.ingestKey, body: batchBody([reportJSON()])).status == .accepted)
            let hooks = try await client.waitForWebhooks(p) { hooks in Self.lastDelivery(hooks, hook.id) != nil }
            let last = try #require(Self.lastDelivery(hooks, hook.id))
            #expect(last["error"] as? String == "connection failed")
            #expect(last["httpStatus"] is NSNull || last["httpStatus"] == nil)
            try await Self.delete(client, p, [hook.id])
        }
        await receiver.stop()
    }

    /// Deletes webhooks, so their pending retries do not follow the next tests around.
    static func delete(_ client: some TestClientProtocol, _ p: ProjectCredentials, _ ids: [String]) async throws {
        for id in ids {
            let response = try await client.query("/v1/projects/\(p.project)/webhooks/\(id)", token: p.readToken, method: .delete)
            #expect(response.status == .noContent)
        }
    }
}

extension CrashDatabase {
    /// Deliveries of a webhook whose lease is running (being sent now).
    func leasedDeliveries(webhook: String) async throws -> Int {
        let rows = try await client.query(
            """
            SELECT count(*)::int FROM webhook_deliveries
            WHERE webhook_id = \(Int64(webhook) ?? 0) AND leased_until > now() AND state = 'pending'
            """, logger: logger)
        for try await n in rows.decode(Int.self) { return n }
        return 0
    }
}
