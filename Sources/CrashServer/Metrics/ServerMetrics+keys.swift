import CoreMetrics
import Metrics
import Synchronization

extension ServerMetrics {
    /// Samples `cache` at every render: `crashguard_ingest_key_lookups_total{result}` (`hit`:
    /// no database round trip; `miss`: looked up, and cached when known; `bypass`: looked up
    /// because the cache is not trusted, its listener not connected),
    /// `crashguard_ingest_key_cache_entries` and `crashguard_ingest_key_cache_listening` (1
    /// while the listener is in place).
    func observeKeys(of cache: IngestKeyCache) {
        let lookups = IngestKeyCache.Outcome.allCases.map {
            ($0, Metrics.Counter(label: "crashguard_ingest_key_lookups_total", dimensions: [("result", $0.rawValue)], factory: factory))
        }
        let entries = Metrics.Gauge(label: "crashguard_ingest_key_cache_entries", factory: factory)
        let listening = Metrics.Gauge(label: "crashguard_ingest_key_cache_listening", factory: factory)
        // Counters only move forward: each render adds what happened since the last one.
        let reported = Mutex(IngestKeyCache.Statistics())
        addRenderHook {
            let now = cache.statistics
            entries.record(now.entries)
            listening.record(now.listening ? 1 : 0)
            reported.withLock { last in
                for (outcome, counter) in lookups {
                    counter.increment(by: now.count(outcome) - last.count(outcome))
                }
                last = now
            }
        }
    }
}

extension IngestKeyCache.Statistics {
    /// Lookups answered with `outcome`.
    func count(_ outcome: IngestKeyCache.Outcome) -> Int {
        switch outcome {
        case .hit: hits
        case .miss: misses
        case .bypass: bypasses
        }
    }
}
