import CrashGrouping
import CrashWire
import Foundation

/// A validated report on its way to the database, with its project and signature.
struct IngestItem: Sendable {
    var projectID: Int64
    var report: Report
    var signature: Signature

    var key: ReportKey { ReportKey(project: projectID, id: report.id) }
    var groupKey: GroupKey { GroupKey(project: projectID, signature: signature.hash) }
}

/// The idempotency key: a report id is stored at most once per project.
struct ReportKey: Hashable, Sendable {
    var project: Int64
    var id: UUID
}

/// A crash group's key: its signature within a project.
struct GroupKey: Hashable, Sendable {
    var project: Int64
    var signature: String
}

extension IngestItem {
    /// A validated report of `project` with its signature, grouped the same way whichever
    /// door (`/v1/reports` or the Sentry routes) it came in by.
    init(project: ProjectRef, report: Report) {
        let signature = Grouping.signature(
            kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
            version: project.groupingVersion)
        self.init(projectID: project.id, report: report, signature: signature)
    }
}
