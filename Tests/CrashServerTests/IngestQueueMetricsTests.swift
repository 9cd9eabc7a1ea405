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

    /// The queue gauge rises while reports wait and falls back to 0 once they are committed,
    /// rather than keeping the depth seen at the last submit.
    @Test func queueGaugeFallsWhenReportsAreCommitted() async throws {
        let store = GatedStore()
        let metrics = ServerMetrics()
        let batcher = IngestBatcher(
            maxQueuedReports: 100, maxBatchReports: 100, maxBatchBytes: .max, timeout: .seconds(30), metrics: metrics,
            logger: TestEnvironment.logger, store: { items, _ in try await store.store(items) }, probe: {})
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
