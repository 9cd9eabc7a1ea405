import CrashIngest
import CrashWire
import Foundation

/// A project's retention (data-protection.md, "Retention"): reports are kept `retentionDays`,
/// counted on their client `timestamp`.
struct Retention: Sendable, Hashable {
    var days: Int

    /// The oldest `timestamp` kept at `now`, for queries and the sweeper alike: the start of the
    /// hour that holds `now − days` (to the hour, as the contract allows: reports in that hour may
    /// still count). Whole hours keep a clamped window on the hourly rollups, and one cut-off
    /// means a report is hidden by every query exactly when the sweeper may erase it.
    func cutoff(now: Date) -> Date { TimeWindow.floor(now.addingTimeInterval(-Double(days) * TimeWindow.day), TimeWindow.hour) }

    /// The oldest `timestamp` ingest accepts at `now`: the older of 30 days and the retention.
    func oldestAccepted(now: Date) -> Date {
        now.addingTimeInterval(-min(ReportLimits.maxAge, Double(days) * TimeWindow.day))
    }

    /// Whether a report of `timestamp` arriving at `now` is already past retention.
    func isPast(_ timestamp: Date, now: Date) -> Bool { timestamp < oldestAccepted(now: now) }

    /// The rejection of such a report, naming `timestamp` as every validation error names its field.
    var rejection: String { "timestamp: older than the project's retention of \(days) days" }
}

extension IngestBatch {
    /// The batch with its reports older than `retentionDays` at `now` moved to `rejected` (in
    /// body order). Nothing to do while the retention is 30 days or more: validation already
    /// refuses what is older than 30 days.
    func rejectingPastRetention(retentionDays: Int, now: Date) -> IngestBatch {
        let retention = Retention(days: retentionDays)
        guard Double(retentionDays) * TimeWindow.day < ReportLimits.maxAge,
            accepted.contains(where: { retention.isPast($0.report.timestamp, now: now) })
        else { return self }
        var batch = self
        batch.accepted = accepted.filter { !retention.isPast($0.report.timestamp, now: now) }
        batch.rejected += accepted.filter { retention.isPast($0.report.timestamp, now: now) }.map {
            IngestResponse.Rejection(index: $0.index, error: retention.rejection)
        }
        batch.rejected.sort { $0.index < $1.index }
        return batch
    }
}
