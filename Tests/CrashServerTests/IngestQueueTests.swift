import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The group-commit queue's rules (admission, batches, expiry, the down mark), on the state
/// machine alone: no tasks, no store, and a clock the test moves, so nothing here sleeps.
@Suite struct IngestQueueTests {
    /// Waiters are the requests' numbers.
    typealias Queue = IngestQueue<Int, ManualClock>

    let clock = ManualClock()

    /// The queue under test, held by reference so that `#expect` may call its mutating methods.
    final class Harness {
        var queue: Queue
        init(_ queue: Queue) { self.queue = queue }

        var queuedReports: Int { queue.queuedReports }
        var isDatabaseDown: Bool { queue.isDatabaseDown }
        func submit(_ items: [IngestItem], waiter: Int) -> Result<Int, APIError> { queue.submit(items, waiter: waiter) }
        func nextBatch(lane: Int = 0) -> Queue.Batch? { queue.nextBatch(lane: lane) }
        func markDown() -> Bool { queue.markDown() }
        func markUp() -> Bool { queue.markUp() }
        func startDraining() { queue.startDraining() }
        func removeAll() -> [Int] { queue.removeAll() }
    }

    func queue(
        maxQueuedReports: Int = 1000, maxBatchReports: Int = 100, maxBatchBytes: Int = .max, timeout: Duration = .seconds(30),
        lanes: Int = 1
    ) -> Harness {
        Harness(
            Queue(
                limits: .init(
                    maxQueuedReports: maxQueuedReports, maxBatchReports: maxBatchReports, maxBatchBytes: maxBatchBytes,
                    timeout: timeout),
                lanes: lanes, clock: clock))
    }

    /// Queues `items` as request `waiter`; the request must be admitted.
    func admit(_ queue: Harness, _ items: [IngestItem], as waiter: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        if case .failure(let refusal) = queue.submit(items, waiter: waiter) {
            Issue.record("request \(waiter) refused: \(refusal.message)", sourceLocation: sourceLocation)
        }
    }

    /// The refusal of a request that must not be admitted.
    func refusal(_ queue: Harness, _ items: [IngestItem]) -> APIError? {
        guard case .failure(let refusal) = queue.submit(items, waiter: -1) else { return nil }
        return refusal
    }

    /// A request that waited a whole deadline in the queue is refused before its batch starts
    /// (nothing stored), so no answer comes later than the queue's deadline plus the
    /// transaction's; one that waited less is stored.
    @Test func aRequestQueuedForAWholeDeadlineIsRefusedUnstored() throws {
        let queue = queue(maxBatchReports: 1, timeout: .seconds(2))
        admit(queue, [ingestItem()], as: 0)
        admit(queue, [ingestItem()], as: 1)
        admit(queue, [ingestItem()], as: 2)
        // Each batch takes 1.2 s (under its 2 s deadline).
        let a = try #require(queue.nextBatch(lane: 0))
        #expect(a.jobs.map(\.waiter) == [0] && a.refused.isEmpty)
        clock.advance(by: .milliseconds(1200))
        let b = try #require(queue.nextBatch(lane: 0))
        #expect(b.jobs.map(\.waiter) == [1] && b.refused.isEmpty)
        // Request 2 has waited 2.4 s when its turn comes.
        clock.advance(by: .milliseconds(1200))
        let c = try #require(queue.nextBatch(lane: 0))
        #expect(c.jobs.isEmpty)
        let refused = try #require(c.refused.first)
        #expect(c.refused.count == 1 && refused.waiter == 2)
        #expect(refused.refusal.status == .serviceUnavailable)
        #expect(refused.refusal.message.contains("busy"))
        #expect(queue.nextBatch(lane: 0) == nil)
        #expect(queue.queuedReports == 0)
    }

    /// The deadline's edge: a request that waited a whole deadline is refused, a nanosecond
    /// less is stored; in one batch the expired ones are refused and the others still go.
    @Test func expiryIsAWholeDeadlinePerRequestWithinABatch() throws {
        let queue = queue(timeout: .seconds(2))
        admit(queue, [ingestItem()], as: 0)
        clock.advance(by: .nanoseconds(1))
        admit(queue, [ingestItem()], as: 1)
        clock.advance(by: .seconds(2) - .nanoseconds(1))
        let batch = try #require(queue.nextBatch(lane: 0))
        #expect(batch.refused.map(\.waiter) == [0])
        #expect(batch.jobs.map(\.waiter) == [1])
        #expect(batch.items.count == 1)
    }

    /// Once a batch found the database unreachable, the requests queued behind it fail at once
    /// (each batch would otherwise wait out the deadline in turn) and new ones are refused
    /// until the mark is cleared.
    @Test func queuedBatchesFailAtOnceWhileTheDatabaseIsDown() throws {
        let queue = queue(maxBatchReports: 1)
        admit(queue, [ingestItem()], as: 0)
        let first = try #require(queue.nextBatch(lane: 0))
        #expect(first.jobs.map(\.waiter) == [0])
        // Five more requests queue behind the failing one, one batch each.
        for n in 1...5 { admit(queue, [ingestItem()], as: n) }
        #expect(queue.queuedReports == 5)
        // The first batch's connection failed: marked down, once.
        #expect(queue.markDown())
        #expect(!queue.markDown())
        #expect(queue.isDatabaseDown)
        var refused: [Int] = []
        while let batch = queue.nextBatch(lane: 0) {
            // Only the first batch tried the database; the queued ones fail without a try.
            #expect(batch.jobs.isEmpty)
            for (waiter, refusal) in batch.refused {
                #expect(refusal.status == .serviceUnavailable)
                #expect(refusal.message.contains("unreachable"))
                refused.append(waiter)
            }
        }
        #expect(refused == [1, 2, 3, 4, 5])
        #expect(refusal(queue, [ingestItem()])?.message.contains("unreachable") == true)
        // A probe answered: ingest is tried again.
        #expect(queue.markUp())
        #expect(!queue.markUp())
        admit(queue, [ingestItem()], as: 6)
        #expect(queue.nextBatch(lane: 0)?.jobs.map(\.waiter) == [6])
    }

    @Test func batchesAreBoundedInBytesAndAnOversizeRequestGoesAlone() throws {
        let small = ingestItem().estimatedBytes
        let queue = queue(maxBatchBytes: 3 * small)
        let big = ingestItem(stack: (0..<8).map { "\($0) Demo 0x1 " + String(repeating: "f", count: 1000) })
        // The frames count: 8 x 1000 bytes, over the bound on its own.
        #expect(big.estimatedBytes > 8000 && big.estimatedBytes > 3 * small)
        // Queued in this order: four small, the big one, a small one.
        var jobs: [[IngestItem]] = (0..<4).map { _ in [ingestItem()] }
        jobs.append([big])
        jobs.append([ingestItem()])
        for (n, job) in jobs.enumerated() { admit(queue, job, as: n) }
        var batches: [[Int]] = []
        while let batch = queue.nextBatch(lane: 0) { batches.append(batch.jobs.map(\.waiter)) }
        // Three small ones fill the bound; the fourth would pass it with the big one, which goes alone.
        #expect(batches == [[0, 1, 2], [3], [4], [5]])
    }

    @Test func batchesAreBoundedInReportsAndTheFirstRequestGoesWhateverItsSize() throws {
        let queue = queue(maxBatchReports: 3)
        admit(queue, (0..<5).map { _ in ingestItem() }, as: 0)
        admit(queue, [ingestItem(), ingestItem()], as: 1)
        admit(queue, [ingestItem()], as: 2)
        var batches: [[Int]] = []
        while let batch = queue.nextBatch(lane: 0) { batches.append(batch.jobs.map(\.waiter)) }
        #expect(batches == [[0], [1, 2]])
    }

    /// Waiting requests go into one transaction; a shared id is stored once and is new for the
    /// first request that holds it only.
    @Test func fullQueueRefusesWith503AndGroupsWaitingRequests() throws {
        let queue = queue(maxQueuedReports: 3)
        let shared = UUID()
        admit(queue, [ingestItem(shared), ingestItem()], as: 0)
        admit(queue, [ingestItem(shared)], as: 1)
        #expect(queue.queuedReports == 3)
        let full = try #require(refusal(queue, [ingestItem()]))
        #expect(full.status == .serviceUnavailable)
        #expect(full.message.contains("full"))
        let batch = try #require(queue.nextBatch(lane: 0))
        #expect(batch.jobs.map(\.waiter) == [0, 1])
        #expect(batch.items.count == 2)
        let outcomes = batch.outcomes(fresh: Set(batch.items.map(\.key)))
        #expect(outcomes.map(\.waiter) == [0, 1])
        #expect(outcomes.map(\.outcome) == [[true, true], [false]])
        // A key the store found already stored (a retry) is a duplicate for everyone.
        let retried = batch.outcomes(fresh: [batch.items[1].key])
        #expect(retried.map(\.outcome) == [[false, true], [false]])
        // The batch left the queue: there is room again.
        #expect(queue.queuedReports == 0)
        admit(queue, [ingestItem()], as: 2)
    }

    /// A large request is admitted whenever the queue is below its bound, like a small one: with
    /// "the whole request must fit" a 1000-report request starved behind single reports that
    /// kept the queue nearly full (the fault suite's flood step).
    @Test func largeRequestIsAdmittedWhileTheQueueIsBelowItsBound() throws {
        let queue = queue(maxQueuedReports: 3)
        admit(queue, [ingestItem(), ingestItem()], as: 0)
        // A ten-report request does not fit whole but the queue has room.
        admit(queue, (0..<10).map { _ in ingestItem() }, as: 1)
        #expect(queue.queuedReports == 12)
        // Now the queue is past its bound: the next request, however small, is refused.
        #expect(refusal(queue, [ingestItem()])?.message.contains("full") == true)
        let batch = try #require(queue.nextBatch(lane: 0))
        #expect(batch.items.count == 12)
    }

    /// Draining refuses new requests but still hands out what is queued; what is left at the end
    /// is given back to be answered.
    @Test func drainingRefusesNewRequestsAndStillCommitsTheQueued() throws {
        let queue = queue(maxBatchReports: 1)
        admit(queue, [ingestItem()], as: 0)
        admit(queue, [ingestItem()], as: 1)
        queue.startDraining()
        let refused = try #require(refusal(queue, [ingestItem()]))
        #expect(refused.message.contains("shutting down") && refused.retryAfter == 5)
        #expect(queue.nextBatch(lane: 0)?.jobs.map(\.waiter) == [0])
        #expect(queue.removeAll() == [1])
        #expect(queue.queuedReports == 0)
        #expect(queue.nextBatch(lane: 0) == nil)
    }

    /// Requests of one group queue in that group's lane, any other in the first; the queue
    /// bound is shared by the lanes, and each lane's batches hold only its own requests.
    @Test func lanesQueueApartAndShareTheBound() throws {
        let lane = { (reason: String) in IngestLanes.lane(of: [ingestItem(reason: reason)], lanes: 2) }
        let (a, b) = try reasonsInTwoLanes()
        let queue = queue(maxQueuedReports: 4, lanes: 2)
        #expect((try? queue.submit([ingestItem(reason: a)], waiter: 0).get()) == lane(a))
        #expect((try? queue.submit([ingestItem(reason: b)], waiter: 1).get()) == lane(b))
        // Two groups: the first lane, wherever each group's own lane is.
        #expect((try? queue.submit([ingestItem(reason: a), ingestItem(reason: b)], waiter: 2).get()) == 0)
        #expect(queue.queuedReports == 4)
        #expect(refusal(queue, [ingestItem(reason: b)])?.message.contains("full") == true)
        for (waiter, group) in [(0, a), (1, b)] {
            let own = lane(group)
            #expect(queue.nextBatch(lane: own)?.jobs.map(\.waiter) == (own == 0 ? [waiter, 2] : [waiter]))
            #expect(queue.nextBatch(lane: own) == nil)
        }
    }
}
