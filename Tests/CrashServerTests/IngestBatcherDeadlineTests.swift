import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import CrashServer

/// The batcher's deadline, the database-down rule and the byte bound, with injected stores.
extension IngestBatcherTests {
    /// Calls that never return and ignore cancellation (a PostgresNIO call hung after a
    /// PostgreSQL restart), released by the test when it ends.
    final class Hung: Sendable {
        private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])

        func forever() async {
            await withCheckedContinuation { continuation in waiting.withLock { $0.append(continuation) } }
        }

        func release() {
            for continuation in waiting.withLock({ $0 }) { continuation.resume() }
        }
    }

    /// A store whose first call runs `first` (which hangs) and whose later calls store everything.
    func hangingOnce(_ first: @escaping @Sendable (CommitGate) async throws -> Void) -> IngestBatcher.Store {
        let calls = Mutex(0)
        return { items, gate in
            let call = calls.withLock { calls in
                calls += 1
                return calls
            }
            if call == 1 { try await first(gate) }
            return Set(items.map(\.key))
        }
    }

    /// The batcher goes on after a hung batch: once the probe clears the mark, the next batch is stored.
    func expectNextBatchStored(_ batcher: IngestBatcher) async throws {
        while batcher.isDatabaseDown { try await Task.sleep(for: .milliseconds(20)) }
        let next = try await withDeadline(.seconds(20)) { await self.answer(batcher, [self.item()]) }
        #expect((try? next.get()) == [true])
    }

    func batcher(
        timeout: Duration, maxBatchReports: Int = 100, maxBatchBytes: Int = .max,
        probe: @escaping @Sendable () async throws -> Void = {}, store: @escaping IngestBatcher.Store
    ) -> IngestBatcher {
        IngestBatcher(
            maxQueuedReports: 1000, maxBatchReports: maxBatchReports, maxBatchBytes: maxBatchBytes, timeout: timeout,
            metrics: ServerMetrics(), logger: TestEnvironment.logger, store: store, probe: probe)
    }

    /// What `submit` ended with: the outcome, or the refusal's status and message.
    func answer(_ batcher: IngestBatcher, _ items: [IngestItem]) async -> Result<IngestBatcher.Outcome, APIError> {
        do {
            return .success(try await batcher.submit(items))
        } catch let error as APIError {
            return .failure(error)
        } catch {
            Issue.record("unexpected error \(error)")
            return .failure(.badRequest("\(error)"))
        }
    }

    @Test func queuedBatchesFailAtOnceWhileTheDatabaseIsDown() async throws {
        let calls = Mutex(0)
        let (entered, enter) = AsyncStream<Void>.makeStream()
        let (gate, open) = AsyncStream<Void>.makeStream()
        let batcher = batcher(timeout: .seconds(30), maxBatchReports: 1, probe: { throw DeadlineExceeded() }) { _, _ in
            calls.withLock { $0 += 1 }
            enter.yield()
            for await _ in gate {}
            throw DeadlineExceeded()  // the connection failed
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let first = Task { await self.answer(batcher, [self.item()]) }
            for await _ in entered { break }
            // Five more requests queue behind the failing one, one batch each.
            let queued = (0..<5).map { _ in Task { await self.answer(batcher, [self.item()]) } }
            while batcher.queuedReports < 5 { try await Task.sleep(for: .milliseconds(5)) }
            open.finish()
            for task in [first] + queued {
                guard case .failure(let refusal) = await task.value else {
                    Issue.record("a request was stored while the database was down")
                    continue
                }
                #expect(refusal.status == .serviceUnavailable)
                #expect(refusal.message.contains("unreachable"))
            }
            // Only the first batch tried the database; the queued ones failed without a try.
            #expect(calls.withLock { $0 } == 1)
            #expect(batcher.isDatabaseDown)
            group.cancelAll()
        }
    }

    /// The reverted branch waited for the transaction to end past the deadline; a call that
    /// never returns then held the batcher (and SIGTERM) forever.
    @Test func aHungTransactionIsAnswered503AtTheDeadlineAndNeverCommits() async throws {
        let hung = Hung()
        let committedAfterItsAnswer = Mutex<Bool?>(nil)
        let batcher = batcher(
            timeout: .milliseconds(300),
            store: hangingOnce { gate in
                await hung.forever()
                // The call returns at last: its transaction may no longer commit.
                committedAfterItsAnswer.withLock { $0 = (try? gate.commit()) != nil }
            })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let refused = try await withDeadline(.seconds(20)) { await self.answer(batcher, [self.item()]) }
            guard case .failure(let refusal) = refused else {
                Issue.record("stored by a hung transaction")
                return
            }
            #expect(refusal.status == .serviceUnavailable)
            // The probe answers: the database is up, so the transaction got three deadlines and
            // was then rolled back as "busy".
            #expect(refusal.message.contains("busy"))
            #expect(!batcher.isDatabaseDown)
            try await expectNextBatchStored(batcher)
            hung.release()
            while committedAfterItsAnswer.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
            #expect(committedAfterItsAnswer.withLock { $0 } == false)
            group.cancelAll()
        }
    }

    /// Past the deadline with the probe failing too, the database is unreachable: marked down,
    /// and the batches queued behind the hung one fail at once, without a try.
    @Test func aHungTransactionWithTheDatabaseGoneMarksItDown() async throws {
        let hung = Hung()
        let calls = Mutex(0)
        let batcher = batcher(timeout: .milliseconds(300), maxBatchReports: 1, probe: { throw DeadlineExceeded() }) { _, _ in
            calls.withLock { $0 += 1 }
            await hung.forever()
            return []
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let first = Task { await self.answer(batcher, [self.item()]) }
            while calls.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            let queued = (0..<3).map { _ in Task { await self.answer(batcher, [self.item()]) } }
            for task in [first] + queued {
                let answer = try await withDeadline(.seconds(20)) { await task.value }
                guard case .failure(let refusal) = answer else {
                    Issue.record("stored while the database was gone")
                    continue
                }
                #expect(refusal.message.contains("unreachable"))
            }
            #expect(batcher.isDatabaseDown)
            #expect(calls.withLock { $0 } == 1)
            hung.release()
            group.cancelAll()
        }
    }

    /// A COMMIT sent before the deadline is the outcome: the answer waits for it (202 here),
    /// never a 503 for a transaction that then commits.
    @Test func aCommitInFlightAtTheDeadlineIsWaitedFor() async throws {
        let batcher = batcher(timeout: .seconds(2)) { items, gate in
            try gate.commit()
            // COMMIT's answer comes 1 s after the deadline (within three deadlines).
            try? await Task.sleep(for: .seconds(3))
            return Set(items.map(\.key))
        }
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let stored = await answer(batcher, [item()])
            #expect((try? stored.get()) == [true])
            #expect(!batcher.isDatabaseDown)
            group.cancelAll()
        }
    }

    /// A COMMIT never answered: the outcome is unknown, so the answer is 500 (retry), never
    /// 503 (which promises nothing was stored); the batcher goes on after three deadlines.
    @Test func aCommitNeverAnsweredIs500OutcomeUnknown() async throws {
        let hung = Hung()
        let batcher = batcher(
            timeout: .milliseconds(300),
            store: hangingOnce { gate in
                try gate.commit()
                await hung.forever()
            })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let unknown = try await withDeadline(.seconds(20)) { await self.answer(batcher, [self.item()]) }
            guard case .failure(let refusal) = unknown else {
                Issue.record("a COMMIT never answered was acknowledged")
                return
            }
            #expect(refusal.status == .internalServerError)
            #expect(refusal.retryAfter != nil)
            #expect(refusal.message.contains("may or may not"))
            try await expectNextBatchStored(batcher)
            hung.release()
            group.cancelAll()
        }
    }

    /// A connection lost while COMMIT was in flight (the store says so) is 500 too.
    @Test func aConnectionLostDuringCommitIs500() async throws {
        let batcher = batcher(timeout: .seconds(30)) { _, gate in
            try gate.commit()
            throw CommitOutcomeUnknown(underlying: DeadlineExceeded())
        }
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let unknown = await answer(batcher, [item()])
            #expect((try? unknown.get()) == nil)
            if case .failure(let refusal) = unknown { #expect(refusal.status == .internalServerError) }
            group.cancelAll()
        }
    }

    /// A request that waited a whole deadline in the queue is refused before its batch starts
    /// (nothing stored), so no answer comes later than 3 deadlines.
    @Test func aRequestQueuedForAWholeDeadlineIsRefusedUnstored() async throws {
        let store = GatedStore()
        let batcher = batcher(timeout: .seconds(2), maxBatchReports: 1) { items, _ in try await store.store(items) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let a = Task { await self.answer(batcher, [self.item()]) }
            while store.batches.withLock({ $0.count }) < 1 { try await Task.sleep(for: .milliseconds(5)) }
            let b = Task { await self.answer(batcher, [self.item()]) }
            while batcher.queuedReports < 1 { try await Task.sleep(for: .milliseconds(5)) }
            let c = Task { await self.answer(batcher, [self.item()]) }
            while batcher.queuedReports < 2 { try await Task.sleep(for: .milliseconds(5)) }
            // Each batch takes 1.2 s (under its 2 s deadline); c has waited 2.4 s when its turn comes.
            try await Task.sleep(for: .milliseconds(1200))
            store.open.yield()
            while store.batches.withLock({ $0.count }) < 2 { try await Task.sleep(for: .milliseconds(5)) }
            try await Task.sleep(for: .milliseconds(1200))
            store.open.yield()
            #expect((try? await a.value.get()) == [true])
            #expect((try? await b.value.get()) == [true])
            guard case .failure(let refusal) = await c.value else {
                Issue.record("a request stored after waiting a whole deadline")
                return
            }
            #expect(refusal.status == .serviceUnavailable)
            #expect(store.batches.withLock { $0.count } == 2)
            group.cancelAll()
        }
    }

    @Test func batchesAreBoundedInBytesAndAnOversizeRequestGoesAlone() async throws {
        let store = GatedStore()
        let small = item().estimatedBytes
        let batcher = batcher(timeout: .seconds(30), maxBatchBytes: 3 * small) { items, _ in try await store.store(items) }
        let big = item(stack: (0..<8).map { "\($0) Demo 0x1 " + String(repeating: "f", count: 1000) })
        // The frames count: 8 x 1000 bytes, over the bound on its own.
        #expect(big.estimatedBytes > 8000 && big.estimatedBytes > 3 * small)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let first = Task { try await batcher.submit([self.item()]) }
            while store.batches.withLock({ $0.count }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            // Queued in this order behind the blocked batch: four small, the big one, a small one.
            var jobs: [[IngestItem]] = (0..<4).map { _ in [self.item()] }
            jobs.append([big])
            jobs.append([self.item()])
            var waiting: [Task<IngestBatcher.Outcome, any Error>] = []
            for (n, job) in jobs.enumerated() {
                waiting.append(Task { try await batcher.submit(job) })
                while batcher.queuedReports < n + 1 { try await Task.sleep(for: .milliseconds(5)) }
            }
            for _ in 0..<5 { store.open.yield() }
            _ = try await first.value
            for task in waiting { #expect(try await task.value == [true]) }
            let ids = jobs.map { $0[0].report.id }
            let batches = store.batches.withLock { $0.dropFirst().map { $0.map(\.report.id) } }
            // Three small ones fill the bound; the fourth would pass it with the big one, which goes alone.
            #expect(batches == [Array(ids[0..<3]), [ids[3]], [ids[4]], [ids[5]]])
            group.cancelAll()
        }
    }
}
