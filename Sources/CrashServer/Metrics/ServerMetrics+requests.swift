import CoreMetrics
import Metrics
import Synchronization

extension ServerMetrics {
    /// Samples the request pools at every render: `crashguard_requests_in_flight{pool}` and
    /// `crashguard_requests_limit{pool}` (`uploads`, `others`; see `ConcurrencyLimitMiddleware`),
    /// so a saturated pool shows before its 503s do.
    func observeRequests(in pools: RequestPools) {
        let gauges = RequestPools.Kind.allCases.map { kind in
            (
                pools[kind],
                Metrics.Gauge(label: "crashguard_requests_in_flight", dimensions: [("pool", kind.rawValue)], factory: factory),
                Metrics.Gauge(label: "crashguard_requests_limit", dimensions: [("pool", kind.rawValue)], factory: factory)
            )
        }
        addRenderHook {
            for (pool, inFlight, limit) in gauges {
                inFlight.record(pool.inFlight.current)
                limit.record(pool.limit)
            }
        }
    }

    /// Samples the ingest body budget at every render: `crashguard_ingest_body_bytes_in_flight`
    /// (received plus decoded bytes held by ingest requests now) and
    /// `crashguard_ingest_body_bytes_limit` (`CRASHGUARD_MAX_INFLIGHT_BODY_BYTES`), so a budget
    /// near full shows before its 503s do; `crashguard_ingest_body_waiting`, the requests
    /// waiting for bytes to come back (``BodyByteBudget/Reservation/growWaiting(to:)``); and
    /// `crashguard_ingest_body_refusals_total{reason}`, the budget's 503s by reason
    /// (``BodyByteBudget/refusals``).
    func observeBudget(_ budget: BodyByteBudget) {
        let inFlight = Metrics.Gauge(label: "crashguard_ingest_body_bytes_in_flight", factory: factory)
        let limit = Metrics.Gauge(label: "crashguard_ingest_body_bytes_limit", factory: factory)
        let waiting = Metrics.Gauge(label: "crashguard_ingest_body_waiting", factory: factory)
        addRenderHook {
            inFlight.record(budget.inUse)
            limit.record(budget.limit)
            waiting.record(budget.waitingNow)
        }
        observeRefusals(budget.refusals, label: "crashguard_ingest_body_refusals_total")
    }

    /// Brings the counter `label{reason}` up to `log`'s counts at every render.
    func observeRefusals(_ log: RefusalLog, label: String) {
        let counters = Mutex<[String: (counter: Metrics.Counter, counted: Int)]>([:])
        let factory = factory
        addRenderHook {
            let counts = log.counts
            counters.withLock { counters in
                for (reason, count) in counts {
                    let entry = counters[reason] ?? (Metrics.Counter(label: label, dimensions: [("reason", reason)], factory: factory), 0)
                    entry.counter.increment(by: count - entry.counted)
                    counters[reason] = (entry.counter, count)
                }
            }
        }
    }
}
