import CrashWire
import Dispatch
import Foundation

/// Main-thread guard (kind `mainThread`): run work that must happen on the main queue
/// (UI updates, main-actor state) there, the seed's hook that moved `setNeedsLayout` and
/// friends to the main queue.
///
/// ```swift
/// MainQueueGuard.run { label.text = title }   // the closure is @MainActor: UIKit compiles under Swift 6
/// ```
///
/// On the main queue the closure runs inline, at once. Anywhere else it is dispatched
/// asynchronously to the main queue and the call is recorded:
/// `Main Thread Checker: API called on a background thread: updateTitle()` (the calling
/// function's name), where an unguarded `dispatchPrecondition(condition: .onQueue(.main))`
/// or `MainActor.assumeIsolated` would have crashed.
///
/// "On the main queue" is detected with a queue-specific key set on the main queue, not
/// with `Thread.isMainThread`, which is `false` for main-queue work once the process has
/// called `dispatchMain()` (servers, and Swift's async `main` on Linux). The main thread
/// itself (also outside any queue) counts as main.
public enum MainQueueGuard {
    private static let key = DispatchSpecificKey<UInt8>()
    private static let marked: Void = {
        DispatchQueue.main.setSpecific(key: key, value: 1)
    }()

    /// Whether the caller runs on the main queue (or the main thread).
    public static var isMainQueue: Bool {
        _ = marked
        return DispatchQueue.getSpecific(key: key) == 1 || Thread.isMainThread
    }

    /// Runs `body` inline on the main queue; from anywhere else dispatches it to the main
    /// queue asynchronously and records. Returns whether it ran inline. `body` is
    /// `@MainActor`, so it may touch main-actor state (UIKit, AppKit) under Swift 6.
    @discardableResult
    public static func run(
        fileID: String = #fileID, line: Int = #line, function: String = #function,
        _ body: @escaping @MainActor @Sendable () -> Void
    ) -> Bool {
        // The main queue is the main actor's executor, so running `body` there is what its
        // isolation asks for. `MainActor.assumeIsolated` is not used: its own check traps
        // where ours (a queue-specific key, or the main thread) says "main" and the
        // runtime's does not, and a guard must never trap.
        let onMain = unsafeBitCast(body, to: (@Sendable () -> Void).self)
        if isMainQueue {
            onMain()
            return true
        }
        DispatchQueue.main.async(execute: onMain)
        GuardRecorder.record(
            .mainThread, site: CallSite(fileID: fileID, line: line, function: function), in: nil,
            reason: "Main Thread Checker: API called on a background thread: \(function)",
            context: ["action": "dispatched to the main queue", "thread": Thread.current.name.flatMap { $0.isEmpty ? nil : $0 } ?? "unnamed"]
        )
        return false
    }
}
