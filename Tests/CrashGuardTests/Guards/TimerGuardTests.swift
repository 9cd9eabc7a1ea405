import CrashGuard
import CrashWire
import Foundation
import Testing

private final class Ticker: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func tick() {
        lock.lock()
        count += 1
        lock.unlock()
    }
    var ticks: Int {
        lock.lock()
        defer { lock.unlock() }
        return count
    }
}

@Suite("timer guard")
struct TimerGuardTests {
    @Test func unguardedUnownedTargetDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            final class Target: @unchecked Sendable { var count = 0 }
            var target: Target? = Target()
            let queue = DispatchQueue(label: "timer")
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.schedule(deadline: .now() + 0.01, repeating: 0.01)
            source.setEventHandler { [unowned target = target!] in target.count += 1 }
            target = nil
            source.resume()
            _ = DispatchSemaphore(value: 0).wait(timeout: .now() + 5)
        }
    }

    @Test func dispatchTimerFiresWhileTheTargetLives() async {
        let ticker = Ticker()
        let (timer, _) = await recordingAsync { _ in
            GuardedTimer.scheduledRepeating(every: 0.01, target: ticker, backend: .dispatch(DispatchQueue(label: "t"))) { target, _ in
                target.tick()
            }
        }
        #expect(await eventuallyTrue { ticker.ticks >= 3 })
        timer.invalidate()
        #expect(!timer.isValid)
        let after = ticker.ticks
        try? await Task.sleep(nanoseconds: 50_000_000)
        #expect(ticker.ticks <= after + 1)
    }

    @Test func dispatchTimerInvalidatesItselfWhenTheTargetIsGone() async {
        let sink = GuardTestSink()
        var timer: GuardedTimer?
        do {
            var ticker: Ticker? = Ticker()
            timer = GuardRecorder.withSink(sink) {
                GuardedTimer.scheduledRepeating(every: 0.01, target: ticker!, backend: .dispatch(DispatchQueue(label: "t"))) { target, _ in
                    target.tick()
                }
            }
            ticker = nil
        }
        #expect(await eventuallyTrue { timer?.isValid == false })
        try? await Task.sleep(nanoseconds: 50_000_000)
        let event = expectOne(
            sink.events, .timer,
            "Timer <GuardedTimer \(objectAddress(timer!))> for target of class Ticker was not invalidated before the target was deallocated")
        #expect(event?.context["action"] == "invalidated the timer")
    }

    @Test func runLoopTimer() async {
        let sink = GuardTestSink()
        let ticker = Ticker()
        let done = DispatchSemaphore(value: 0)
        let box = TimerBox()
        let thread = Thread {
            box.ticker = Ticker()
            // Scoped to this test's sink: the timer remembers the scope it was created in.
            box.timer = GuardRecorder.withSink(sink) {
                GuardedTimer.scheduledRepeating(every: 0.01, target: box.ticker!, backend: .runLoop(.current)) { target, _ in
                    target.tick()
                    ticker.tick()
                }
            }
            RunLoop.current.run(until: Date().addingTimeInterval(0.2))
            box.ticker = nil  // the target goes away without invalidating
            RunLoop.current.run(until: Date().addingTimeInterval(0.3))
            done.signal()
        }
        thread.start()
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                done.wait()
                continuation.resume()
            }
        }
        #expect(ticker.ticks >= 3)
        #expect(box.timer?.isValid == false)
        expectOne(
            sink.events, .timer,
            "Timer <GuardedTimer \(objectAddress(box.timer!))> for target of class Ticker was not invalidated before the target was deallocated")
    }
}

private final class TimerBox: @unchecked Sendable {
    var ticker: Ticker?
    var timer: GuardedTimer?
}
