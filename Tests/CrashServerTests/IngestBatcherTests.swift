import CrashGrouping
import CrashWire
import Foundation
import ServiceLifecycle
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The batcher's queue rules, with an injected store (no database: these test the
/// queueing logic; the database path is covered by IngestTests).
@Suite struct IngestBatcherTests {
    /// A store that blocks until released, recording every batch it was given.
    final class GatedStore: Sendable {
        let batches = Mutex<[[IngestItem]]>([])
        let gate: AsyncStream<Void>
        let open: AsyncStream<Void>.Continuation
        init() { (gate, open) = AsyncStream.makeStream() }

        func store(_ items: [IngestItem]) async throws -> Set<ReportKey> {
            batches.withLock { $0.append(items) }
            for await _ in gate { break }
            return Set(items.map(\.key))
        }
    }

    @Test func aRequestOfOneGroupGoesToItsGroupsLaneAnyOtherToTheFirst() throws {
        let (a, b) = try reasonsInTwoLanes()
        let laneA = IngestLanes.lane(of: [ingestItem(reason: a)], lanes: 2)
        // Every request of one group, whatever its size, goes to the same lane.
        #expect(IngestLanes.lane(of: [ingestItem(reason: a), ingestItem(reason: a)], lanes: 2) == laneA)
        #expect(IngestLanes.lane(of: [ingestItem(reason: b)], lanes: 2) == 1 - laneA)
        // Two groups: the first lane, wherever each group's own lane is.
        #expect(IngestLanes.lane(of: [ingestItem(reason: a), ingestItem(reason: b)], lanes: 2) == 0)
        #expect(IngestLanes.lane(of: [ingestItem(reason: b), ingestItem(reason: a)], lanes: 2) == 0)
        // One lane: always it.
        #expect(IngestLanes.lane(of: [ingestItem(reason: b)], lanes: 1) == 0)
        // Groups spread over every lane.
        #expect(Set((0..<100).map { IngestLanes.lane(of: [ingestItem(reason: "Bug\($0) crashed")], lanes: 3) }) == [0, 1, 2])
    }

    /// Two lanes hold two transactions in flight: while one lane's commit is blocked, a request
    /// of a group of the other lane is committed; a request of two groups waits for the first
    /// lane; shutdown commits both lanes' queues.
    @Test func twoLanesCommitAtOnceAndShutdownDrainsBoth() async throws {
        let (a, b) = try reasonsInTwoLanes()
        // Blocks every commit until opened (several at once: one AsyncStream cannot wait in two).
        let batches = Mutex<[[IngestItem]]>([])
        let opened = Atomic(false)
        let batcher = IngestBatcher(
            maxQueuedReports: 100, maxBatchReports: 100, maxBatchBytes: .max, timeout: .seconds(30),
            metrics: ServerMetrics(), logger: TestEnvironment.logger,
            store: { items, _ in
                batches.withLock { $0.append(items) }
                while !opened.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(2)) }
                return Set(items.map(\.key))
            },
            lanes: 2, probe: {})
        let services = ServiceGroup(configuration: .init(services: [batcher], logger: TestEnvironment.logger))
        let run = Task { try await services.run() }
        let inA = Task { try await batcher.submit([ingestItem(reason: a)]) }
        let inB = Task { try await batcher.submit([ingestItem(reason: b)]) }
        // Both are in the store at once: neither waits for the other's commit.
        var waited = 0
        while batches.withLock({ $0.count }) < 2 {
            waited += 1
            try #require(waited < 1000, "the second lane's request waited for the first lane's commit")
            try await Task.sleep(for: .milliseconds(5))
        }
        // A request of both groups goes to the first lane and waits behind its commit.
        let mixed = Task { try await batcher.submit([ingestItem(reason: a), ingestItem(reason: b)]) }
        while batcher.queuedReports < 2 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(batches.withLock { $0.count } == 2)
        // Graceful shutdown: the queued request is still committed.
        await services.triggerGracefulShutdown()
        opened.store(true, ordering: .releasing)
        #expect(try await inA.value == [true])
        #expect(try await inB.value == [true])
        #expect(try await mixed.value == [true, true])
        try await run.value
        #expect(batches.withLock { $0.map(\.count).sorted() } == [1, 1, 2])
    }

    /// A running batcher (queue bound `maxQueuedReports`) whose first request, of one report,
    /// is held in a blocked commit while `body` runs; each `store.open.yield()` lets a commit end.
    func withCommitBlocked(
        maxQueuedReports: Int,
        _ body: (IngestBatcher, GatedStore, Task<IngestBatcher.Outcome, any Error>) async throws -> Void
    ) async throws {
        let store = GatedStore()
        let batcher = IngestBatcher(
            maxQueuedReports: maxQueuedReports, maxBatchReports: 100, maxBatchBytes: .max, timeout: .seconds(30),
            metrics: ServerMetrics(), logger: TestEnvironment.logger, store: { items, _ in try await store.store(items) },
            probe: {})
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let first = Task { try await batcher.submit([ingestItem()]) }
            while store.batches.withLock({ $0.count }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            try await body(batcher, store, first)
            group.cancelAll()
        }
    }

    @Test func fullQueueRefusesWith503AndGroupsWaitingRequests() async throws {
        try await withCommitBlocked(maxQueuedReports: 3) { batcher, store, first in
            // Three more reports queue up behind the blocked commit; a fourth does not fit.
            let shared = UUID()
            let second = Task { try await batcher.submit([ingestItem(shared), ingestItem()]) }
            let third = Task { try await batcher.submit([ingestItem(shared)]) }
            while batcher.queuedReports < 3 { try await Task.sleep(for: .milliseconds(5)) }
            await #expect(throws: APIError.self) { try await batcher.submit([ingestItem()]) }
            store.open.yield()
            store.open.yield()
            #expect(try await first.value == [true])
            // Both waiting requests went into one transaction; the shared id counts once.
            let outcomes = [try await second.value, try await third.value]
            #expect(outcomes.flatMap { $0 }.filter { $0 }.count == 2)
            #expect(store.batches.withLock { $0.map(\.count) } == [1, 2])
        }
    }

    /// A large request is admitted whenever the queue is below its bound, like a small one: with
    /// "the whole request must fit" a 1000-report request starved behind single reports that
    /// kept the queue nearly full (the fault suite's flood step).
    @Test func largeRequestIsAdmittedWhileTheQueueIsBelowItsBound() async throws {
        try await withCommitBlocked(maxQueuedReports: 3) { batcher, store, first in
            // Two reports wait; a ten-report request does not fit whole but the queue has room.
            let small = Task { try await batcher.submit([ingestItem(), ingestItem()]) }
            while batcher.queuedReports < 2 { try await Task.sleep(for: .milliseconds(5)) }
            let large = Task { try await batcher.submit((0..<10).map { _ in ingestItem() }) }
            while batcher.queuedReports < 12 { try await Task.sleep(for: .milliseconds(5)) }
            // Now the queue is past its bound: the next request, however small, is refused.
            await #expect(throws: APIError.self) { try await batcher.submit([ingestItem()]) }
            store.open.yield()
            store.open.yield()
            #expect(try await first.value == [true])
            #expect(try await small.value == [true, true])
            #expect(try await large.value == Array(repeating: true, count: 10))
            #expect(store.batches.withLock { $0.map(\.count) } == [1, 12])
        }
    }

    @Test func databaseFailureIs503AndNothingIsAcknowledged() async throws {
        let probes = Mutex(0)
        let batcher = IngestBatcher(
            maxQueuedReports: 100, maxBatchReports: 100, maxBatchBytes: .max, timeout: .seconds(30), metrics: ServerMetrics(),
            logger: TestEnvironment.logger, store: { _, _ in throw DeadlineExceeded() },
            probe: {
                probes.withLock { $0 += 1 }
            })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            await #expect(throws: APIError.self) { try await batcher.submit([ingestItem()]) }
            // Marked down until the probe answers; then ingest is tried again.
            var waited = 0
            while batcher.isDatabaseDown, waited < 400 {
                try await Task.sleep(for: .milliseconds(10))
                waited += 1
            }
            #expect(!batcher.isDatabaseDown)
            #expect(probes.withLock { $0 } >= 1)
            group.cancelAll()
        }
    }
}
