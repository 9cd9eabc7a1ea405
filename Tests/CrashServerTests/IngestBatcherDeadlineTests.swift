import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The batcher's own deadline on a transaction, end to end, with injected stores that hang, fail
/// or answer late: these race real tasks against calls that never return, which the queue's
/// state machine does not see. The queue's rules (admission, batches, a request's expiry in the
/// queue, refusing what is queued while the database is down) are `IngestQueueTests`, on a
/// clock the test moves.
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
        let next = try await withDeadline(.seconds(20)) { await self.answer(batcher, [ingestItem()]) }
        #expect((try? next.get()) == [true])
    }

    func batcher(
        timeout: Duration, maxBatchReports: Int = 100, maxBatchBytes: Int = .max,
        probe: @escaping @Sendable () async throws -> Void = {}, clock: any Clock<Duration> = ContinuousClock(),
        store: @escaping IngestBatcher.Store
    ) -> IngestBatcher {
        IngestBatcher(
            maxQueuedReports: 1000, maxBatchReports: maxBatchReports, maxBatchBytes: maxBatchBytes, timeout: timeout,
            metrics: ServerMetrics(), logger: TestEnvironment.logger, store: store, probe: probe, clock: clock)
    }

    /// Waits (20 s at most, in real time) until a sleep on `clock` waits for `offset` from its start.
    func expectSleeper(on clock: ManualClock, at offset: Duration) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !clock.sleepers.contains(ManualClock.Instant(offset: offset)) {
            guard ContinuousClock.now < deadline else {
                Issue.record("no sleep until \(offset) on the clock; sleeping: \(clock.sleepers.map(\.offset))")
                throw DeadlineExceeded()
            }
            try await Task.sleep(for: .milliseconds(5))
        }
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

    /// Past the deadline the batcher stops waiting for the transaction: a call that never
    /// returns holds neither the batcher nor SIGTERM.
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
            let refused = try await withDeadline(.seconds(20)) { await self.answer(batcher, [ingestItem()]) }
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
            let first = Task { await self.answer(batcher, [ingestItem()]) }
            while calls.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            let queued = (0..<3).map { _ in Task { await self.answer(batcher, [ingestItem()]) } }
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
    /// never a 503 for a transaction that then commits. On a clock the test moves: the COMMIT's
    /// answer comes 1 s after the deadline, within three deadlines.
    @Test func aCommitInFlightAtTheDeadlineIsWaitedFor() async throws {
        let clock = ManualClock()
        let commitAnswer = Hung()
        let committed = Mutex(false)
        let batcher = batcher(timeout: .seconds(2), clock: clock) { items, gate in
            try gate.commit()
            committed.withLock { $0 = true }
            await commitAnswer.forever()
            return Set(items.map(\.key))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await batcher.run() }
            let answered = Mutex(false)
            let stored = Task {
                let outcome = await self.answer(batcher, [ingestItem()])
                answered.withLock { $0 = true }
                return outcome
            }
            // The transaction's deadline is set, and its COMMIT sent.
            try await expectSleeper(on: clock, at: .seconds(2))
            while !committed.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            clock.advance(by: .seconds(2))
            // Past the deadline the batcher waits on, until three deadlines from the start.
            try await expectSleeper(on: clock, at: .seconds(6))
            clock.advance(by: .seconds(1))
            #expect(!answered.withLock { $0 })
            commitAnswer.release()
            let outcome = try await withDeadline(.seconds(20)) { await stored.value }
            #expect((try? outcome.get()) == [true])
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
            let unknown = try await withDeadline(.seconds(20)) { await self.answer(batcher, [ingestItem()]) }
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
            let unknown = await answer(batcher, [ingestItem()])
            #expect((try? unknown.get()) == nil)
            if case .failure(let refusal) = unknown { #expect(refusal.status == .internalServerError) }
            group.cancelAll()
        }
    }
}
