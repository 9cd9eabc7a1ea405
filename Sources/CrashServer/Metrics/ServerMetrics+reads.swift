import CoreMetrics
import Metrics
import Synchronization

extension ServerMetrics {
    /// Samples `reader` into the read-replica metrics at every render:
    /// `crashguard_read_replica_up`, `crashguard_read_replica_lag_seconds` and `_bytes`,
    /// `crashguard_reads_total{target}` and `crashguard_read_fallbacks_total{reason}`.
    func observeReads(of reader: ReadReplica) {
        let up = Metrics.Gauge(label: "crashguard_read_replica_up", factory: factory)
        let lagSeconds = Metrics.Gauge(label: "crashguard_read_replica_lag_seconds", factory: factory)
        let lagBytes = Metrics.Gauge(label: "crashguard_read_replica_lag_bytes", factory: factory)
        let reads = ["standby", "primary"].map {
            Metrics.Counter(label: "crashguard_reads_total", dimensions: [("target", $0)], factory: factory)
        }
        let fallbacks = ReadReplica.FallbackReason.allCases.map {
            ($0, Metrics.Counter(label: "crashguard_read_fallbacks_total", dimensions: [("reason", $0.rawValue)], factory: factory))
        }
        // Counters only move forward: each render adds what happened since the last one.
        let reported = Mutex<ReadReplica.State>(ReadReplica.State())
        addRenderHook {
            let now = reader.current
            up.record(now.up ? 1 : 0)
            lagSeconds.record(now.lagSeconds)
            lagBytes.record(Double(now.lagBytes))
            reported.withLock { last in
                reads[0].increment(by: now.standbyReads - last.standbyReads)
                reads[1].increment(by: now.primaryReads - last.primaryReads)
                for (reason, counter) in fallbacks {
                    counter.increment(by: now.fallbacks[reason, default: 0] - last.fallbacks[reason, default: 0])
                }
                last = now
            }
        }
    }
}
