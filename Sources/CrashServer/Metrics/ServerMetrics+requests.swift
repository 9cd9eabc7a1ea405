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
}
