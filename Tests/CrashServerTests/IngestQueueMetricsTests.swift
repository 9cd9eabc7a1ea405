import Foundation
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

extension IngestBatcherTests {
    /// The value of `crashguard_ingest_queue_reports` in the `/metrics` text.
    func queueGauge(_ metrics: ServerMetrics) -> Double? {
        String(decoding: metrics.render(), as: UTF8.self)
            .split(separator: "\n")
            .first { $0.hasPrefix("crashguard_ingest_queue_reports ") }
            .flatMap { Double($0.split(separator: " ")[1]) }
    }

    /// A batcher over a ``GatedStore`` (each batch commits when the test opens the gate) and its metrics.
    func gatedBatcher(maxQueuedReports: Int) -> (GatedStore, ServerMetrics, IngestBatcher) {
        let store = GatedStore()
        let metrics = ServerMetrics()
        let batcher = IngestBatcher(
            maxQueuedReports: maxQueuedReports, maxBatchReports: maxQueuedReports, maxBatchBytes: .max, timeout: .seconds(30),
            metrics: metrics, logger: TestEnvironment.logger, store: { items, _ in try await store.store(items) }, probe: {})
        return (store, metrics, batcher)
    }

    /// The queue gauge rises while reports wait and falls back to 0 once they are committed,
    /// rather than keeping the depth seen at the last submit.
    @Test func queueGaugeFallsWhenReportsAreCommitted() async throws {
        let (store, metrics, batcher) = gatedBatcher(maxQueuedReports: 100)
        metrics.observeQueue(of: batcher)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            // The first request is taken into a (blocked) commit; two reports wait behind it.
            let first = Task { try await batcher.submit([ingestItem()]) }
            while store.batches.withLock({ $0.count }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            let second = Task { try await batcher.submit([ingestItem(), ingestItem()]) }
            while batcher.queuedReports < 2 { try await Task.sleep(for: .milliseconds(5)) }
            #expect(queueGauge(metrics) == 2)
            store.open.yield()
            store.open.yield()
            _ = try await first.value
            _ = try await second.value
            #expect(queueGauge(metrics) == 0)
            group.cancelAll()
        }
    }
}

extension IngestBatcherTests {
    /// A request refused because the queue is full is counted by reason on `/metrics`
    /// (`crashguard_ingest_queue_refusals_total`), not only as a 503 among the HTTP statuses.
    @Test func queueRefusalsAreCounted() async throws {
        let (store, metrics, batcher) = gatedBatcher(maxQueuedReports: 1)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let first = Task { try await batcher.submit([ingestItem()]) }
            while store.batches.withLock({ $0.count }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            let second = Task { try await batcher.submit([ingestItem()]) }
            while batcher.queuedReports < 1 { try await Task.sleep(for: .milliseconds(5)) }
            await #expect(throws: APIError.self) { try await batcher.submit([ingestItem()]) }
            let text = String(decoding: metrics.render(), as: UTF8.self)
            #expect(text.contains(#"crashguard_ingest_queue_refusals_total{reason="admission"} 1"#), "\(text)")
            #expect(batcher.refusals.counts == ["admission": 1])
            store.open.yield()
            store.open.yield()
            _ = try await first.value
            _ = try await second.value
            group.cancelAll()
        }
    }
}
