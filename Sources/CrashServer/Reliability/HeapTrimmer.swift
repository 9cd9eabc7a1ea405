import Logging
import ServiceLifecycle

/// Gives the heap's free pages back to the system once ingest goes quiet after a burst.
///
/// glibc returns the pages of a freed block only when they are at the top of a heap; the
/// strings, reports and buffers of a burst are freed in every order, so their pages stay
/// resident between the blocks that live on (about 40 to 50 MB after a minute of batches of
/// 100, 1000 or the largest bodies: RSS 91 to 106 MB after the load, where the idle server
/// takes 40 MB). `malloc_trim(0)` hands those pages back without moving anything; it walks
/// every arena under its lock, so it is called when no ingest body is in flight, and only
/// when one has been since the last call: an idle server never calls it, a busy one at
/// most once per ``interval`` (docs/performance.md).
struct HeapTrimmer: Service {
    let budget: BodyByteBudget
    /// How often the budget is looked at.
    var interval = 1.0
    var trim: @Sendable () -> Bool = MallocTuning.trim
    let logger: Logger

    func run() async throws {
        var seen = budget.opened
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            await PollingService.sleep(seconds: interval)
            let opened = budget.opened
            guard opened != seen, budget.openNow == 0 else { continue }
            seen = opened
            let start = ContinuousClock.now
            let released = trim()
            logger.debug("heap trimmed", metadata: ["released": "\(released)", "took": "\(ContinuousClock.now - start)"])
        }
    }
}
