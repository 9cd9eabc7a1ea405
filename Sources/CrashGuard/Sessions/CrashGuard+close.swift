import Foundation

extension CrashGuard {
    /// Ends the app's session as `exited`, uploads everything queued (the session's end
    /// included) waiting at most `timeout`, then stops. The last call of a command-line tool
    /// or a server about to exit on purpose; returns `true` when the queue is empty.
    /// Without it, a clean exit still ends the session (`atexit`), and its update is sent at
    /// the next start.
    @discardableResult
    public static func close(timeout: Duration = .seconds(5)) async -> Bool {
        SessionLifecycle.end()
        let flushed = await flush(timeout: timeout)
        await stop()
        return flushed
    }

    /// ``close(timeout:)`` for synchronous code: blocks the calling thread (not from an
    /// `async` context).
    @discardableResult
    public static func closeAndWait(timeout: Duration = .seconds(5)) -> Bool {
        waitBlocking { await close(timeout: timeout) }
    }

    /// Runs `body` on a detached task and blocks the calling thread until it returns.
    static func waitBlocking(_ body: @escaping @Sendable () async -> Bool) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let result = LockedBox(false)
        Task.detached {
            let value = await body()
            result.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLock { $0 }
    }
}
