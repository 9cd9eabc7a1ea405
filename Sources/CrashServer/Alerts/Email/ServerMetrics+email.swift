import CoreMetrics
import Metrics

extension ServerMetrics {
    /// Counts one e-mail delivery attempt by outcome (`crashguard_email_deliveries_total`):
    /// `delivered`, `retry` (failed, another attempt due) or `failed` (given up, or refused
    /// for good).
    func countEmail(outcome: String) {
        Metrics.Counter(label: "crashguard_email_deliveries_total", dimensions: [("outcome", outcome)], factory: factory)
            .increment()
    }
}
