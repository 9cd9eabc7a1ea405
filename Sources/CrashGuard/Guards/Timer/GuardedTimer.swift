import CrashWire
import Dispatch
import Foundation

/// Timer guard (kind `timer`): a repeating timer whose target is held weakly, the seed's
/// timer proxy.
///
/// A repeating `Timer` retains its target until invalidated, so a target that forgets to
/// invalidate leaks and keeps firing; with `[unowned self]` it dies instead. A guarded
/// timer holds the target weakly, and the first time it fires after the target is gone it
/// invalidates itself and records
/// `Timer <GuardedTimer 0x...> for target of class Ticker was not invalidated before the target was deallocated`.
///
/// ```swift
/// timer = GuardedTimer.scheduledRepeating(every: 1, target: self, backend: .dispatch(.main)) { me, _ in
///     me.tick()
/// }
/// ```
///
/// Backends: `.runLoop(_:mode:)` schedules a Foundation `Timer` on a run loop (apps);
/// `.dispatch(_:)` uses a `DispatchSourceTimer` on a queue (servers, which run no run
/// loop). Like `Timer`, a scheduled timer keeps itself alive until it is invalidated.
public final class GuardedTimer: @unchecked Sendable {
    /// Where the timer runs.
    public enum Backend {
        /// A Foundation `Timer` added to `runLoop` in `mode`; the run loop must be running.
        case runLoop(RunLoop, mode: RunLoop.Mode = .default)
        /// A `DispatchSourceTimer` on `queue`.
        case dispatch(DispatchQueue)
    }

    private enum Source {
        case timer(Timer)
        case dispatch(any DispatchSourceTimer)
    }

    private let state = LockedBox<(source: Source?, fires: Int, valid: Bool)>((nil, 0, true))
    private let scope = GuardRecorder.captureScope()
    private let site: CallSite
    private let targetType: String

    private init(targetType: String, site: CallSite) {
        self.targetType = targetType
        self.site = site
    }

    /// Schedules a timer that calls `action` with the target every `interval` seconds
    /// (first after one interval) until invalidated or the target is gone.
    public static func scheduledRepeating<Target: AnyObject>(
        every interval: TimeInterval, target: Target, backend: Backend = .dispatch(.main),
        fileID: String = #fileID, line: Int = #line, function: String = #function,
        action: @escaping (Target, GuardedTimer) -> Void
    ) -> GuardedTimer {
        let timer = GuardedTimer(
            targetType: Describe.typeName(type(of: target)),
            site: CallSite(fileID: fileID, line: line, function: function)
        )
        let weakTarget = WeakBox(target)
        let call = UncheckedBox(action)
        // The backend holds the timer strongly until `invalidate()`, as a run loop holds a Timer.
        let fire: @Sendable () -> Void = {
            timer.fire(target: weakTarget, action: call)
        }
        let interval = max(interval, 0.0001)
        switch backend {
        case .runLoop(let runLoop, let mode):
            let t = Timer(timeInterval: interval, repeats: true) { _ in fire() }
            timer.state.withLock { $0.source = .timer(t) }
            runLoop.add(t, forMode: mode)
        case .dispatch(let queue):
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(Int(min(interval * 100, 100))))
            source.setEventHandler(handler: fire)
            timer.state.withLock { $0.source = .dispatch(source) }
            source.resume()
        }
        return timer
    }

    /// Stops the timer; safe to call more than once.
    public func invalidate() {
        let source = state.withLock { state -> Source? in
            state.valid = false
            defer { state.source = nil }
            return state.source
        }
        switch source {
        case .timer(let t): t.invalidate()
        case .dispatch(let s):
            s.setEventHandler(handler: nil)
            s.cancel()
        case nil: break
        }
    }

    /// Whether the timer will fire again.
    public var isValid: Bool { state.withLock { $0.valid } }

    /// How many times the action ran.
    public var fireCount: Int { state.withLock { $0.fires } }

    private func fire<Target: AnyObject>(target: WeakBox<Target>, action: UncheckedBox<(Target, GuardedTimer) -> Void>) {
        guard isValid else { return }
        guard let strong = target.value else {
            invalidate()
            GuardRecorder.record(
                .timer, site: site, in: scope,
                reason: "Timer \(Describe.object(self)) for target of class \(targetType) was not invalidated before the target was deallocated",
                context: ["action": "invalidated the timer", "fires": String(fireCount)]
            )
            return
        }
        state.withLock { $0.fires += 1 }
        action.value(strong, self)
    }
}

/// A weak reference that can cross into `@Sendable` closures.
final class WeakBox<Value: AnyObject>: @unchecked Sendable {
    weak var value: Value?
    init(_ value: Value) { self.value = value }
}
