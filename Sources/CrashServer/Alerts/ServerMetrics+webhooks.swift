import CoreMetrics
import Metrics

extension ServerMetrics {
    /// Counts one delivery attempt by outcome (`crashguard_webhook_deliveries_total`):
    /// `delivered`, `retry` (failed, another attempt due), `failed` (given up) or `dropped`
    /// (its group no longer exists).
    func countDelivery(outcome: String) {
        Metrics.Counter(label: "crashguard_webhook_deliveries_total", dimensions: [("outcome", outcome)], factory: factory)
            .increment()
    }
}
