import CoreMetrics
import Metrics

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
    /// near full shows before its 503s do.
    func observeBudget(_ budget: BodyByteBudget) {
        let inFlight = Metrics.Gauge(label: "crashguard_ingest_body_bytes_in_flight", factory: factory)
        let limit = Metrics.Gauge(label: "crashguard_ingest_body_bytes_limit", factory: factory)
        addRenderHook {
            inFlight.record(budget.inUse)
            limit.record(budget.limit)
        }
    }
}
