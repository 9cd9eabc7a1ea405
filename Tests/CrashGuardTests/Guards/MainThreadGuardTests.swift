import CrashGuard
import CrashWire
import Dispatch
import Foundation
import Testing

private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() {
        lock.lock()
        value = true
        lock.unlock()
    }
    var isSet: Bool {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}

@Suite("mainThread guard")
struct MainThreadGuardTests {
    @Test func unguardedMainQueuePreconditionDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            DispatchQueue.global().async { dispatchPrecondition(condition: .onQueue(.main)) }
            _ = DispatchSemaphore(value: 0).wait(timeout: .now() + 5)
        }
    }

    @Test func offMainHopsAndRecords() async {
        let flag = Flag()
        // Test functions run on the cooperative thread pool, never on the main queue.
        let (inline, events) = recording { MainQueueGuard.run { flag.set() } }
        #expect(!inline)
        let event = expectOne(events, .mainThread, "Main Thread Checker: API called on a background thread: offMainHopsAndRecords()")
        #expect(event?.context["action"] == "dispatched to the main queue")
        #expect(await eventuallyTrue { flag.isSet })
    }

    @Test func onMainRunsInline() async {
        let (inline, events) = await recordingAsync { _ in
            await MainActor.run {
                let flag = Flag()
                let inline = MainQueueGuard.run { flag.set() }
                return inline && flag.isSet && MainQueueGuard.isMainQueue
            }
        }
        #expect(inline)
        #expect(events.isEmpty)
    }

    @Test func mainQueueIsDetectedWithoutIsMainThread() async {
        // On the main queue the answer comes from the queue-specific key, whatever thread
        // services the queue (after dispatchMain(), it is not the main thread).
        let answer: Bool = await withCheckedContinuation { continuation in
            DispatchQueue.main.async { continuation.resume(returning: MainQueueGuard.isMainQueue) }
        }
        #expect(answer)
        let background: Bool = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: MainQueueGuard.isMainQueue) }
        }
        #expect(!background)
    }
}
