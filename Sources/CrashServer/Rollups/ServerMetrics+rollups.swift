import CoreMetrics
import Metrics
import Synchronization

extension ServerMetrics {
    /// Records one aggregator cycle and what is left pending after it:
    /// `crashguard_rollup_reports_total` (reports folded here), `crashguard_rollup_pending_rows`,
    /// `crashguard_rollup_pending_reports`, `crashguard_rollup_pending_age_seconds` (the oldest
    /// pending row's) and `crashguard_rollup_aggregating` (1 while this server holds the
    /// aggregator's lock, 0 while another does).
    func recordRollups(_ cycle: RollupCycle, tail: RollupTail) {
        let aggregating = Metrics.Gauge(label: "crashguard_rollup_aggregating", factory: factory)
        switch cycle {
        case .standby:
            aggregating.record(0)
        case .folded(_, let reports, _):
            aggregating.record(1)
            Metrics.Counter(label: "crashguard_rollup_reports_total", factory: factory).increment(by: reports)
        }
        Metrics.Gauge(label: "crashguard_rollup_pending_rows", factory: factory).record(tail.rows)
        Metrics.Gauge(label: "crashguard_rollup_pending_reports", factory: factory).record(tail.reports)
        Metrics.Gauge(label: "crashguard_rollup_pending_age_seconds", factory: factory).record(tail.ageSeconds)
    }

    /// Samples `cycles` at every render: `crashguard_rollup_wait_expired_total`, the reads that
    /// stopped waiting for the aggregator at their budget and read the rollups as they stood
    /// (``RollupFreshness``).
    func observeRollupWaits(of cycles: RollupCycles) {
        let expired = Metrics.Counter(label: "crashguard_rollup_wait_expired_total", factory: factory)
        // Counters only move forward: each render adds what happened since the last one.
        let reported = Mutex(0)
        addRenderHook {
            let now = cycles.expiredWaitCount
            reported.withLock { last in
                expired.increment(by: now - last)
                last = now
            }
        }
    }
}
