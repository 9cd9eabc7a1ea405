import CoreMetrics
import Metrics

extension ServerMetrics {
    /// Counts the reports of one request that a scrubbing rule changed
    /// (`crashguard_reports_scrubbed_total`, by door: `reports`, `sentry`, `apple`), as received:
    /// a duplicate or a request the quota refuses counts too, since it was scrubbed.
    func recordScrubbed(_ items: [IngestItem], door: String) {
        let scrubbed = items.reduce(0) { $0 + ($1.scrubbed ? 1 : 0) }
        guard scrubbed > 0 else { return }
        Metrics.Counter(label: "crashguard_reports_scrubbed_total", dimensions: [("door", door)], factory: factory)
            .increment(by: scrubbed)
    }
}
