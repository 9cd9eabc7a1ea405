import CrashGrouping
import CrashIngest
import CrashWire
import Foundation

/// A validated report on its way to the database, with its project and signature.
///
/// A class: the batcher and the ingest statements pass items through several arrays
/// (queue, batch, fresh ones, first of each group), and copying a report's dozen strings
/// each time was about 5 % of the server's ingest CPU; a reference is one retain.
final class IngestItem: Sendable {
    let projectID: Int64
    /// The report without its `stack`, which is kept as ``stack`` instead.
    let report: Report
    let signature: Signature
    /// The report's `stack` as the JSON text its `reports` row stores: the body's own text
    /// of the array (`POST /v1/reports`), or written once here from the frames.
    ///
    /// One buffer rather than a `String` per frame: at batch 100 x 64, strings per frame would
    /// be 27 of the server's 46 MB of Swift allocations at its peak (`heaptrack`), about twice
    /// the text they hold (each frame's header and allocation, and the array); the buffer
    /// holds the text once, and the committer writes it as it is.
    ///
    /// An array, not a `ByteBuffer`: a buffer's capacity is a power of two, and at batch 100 x 64
    /// the stacks' buffers were 23.7 of the server's 67.5 MB of heap at its peak (`heaptrack`,
    /// docs/performance.md), about 1.5 times the text they held.
    let stack: [UInt8]?
    /// The request's claim on its project's daily quota; nil when the project has none.
    let quota: QuotaClaim?
    /// Whether the scrubber changed the report, which is as scrubbed (data-protection.md, "Read back").
    let scrubbed: Bool

    /// - Parameter stackJSON: `report.stack` as JSON text when the caller has it (the body's
    ///   own text, ``IngestBatch/Accepted/stackJSON``); written from the frames when nil.
    init(
        projectID: Int64, report: Report, signature: Signature, stackJSON: [UInt8]? = nil, quota: QuotaClaim? = nil,
        scrubbed: Bool = false
    ) {
        var report = report
        stack =
            stackJSON
            ?? report.stack.map { frames in
                // Sized for frames without escapes (the usual case): written without growing.
                var text: [UInt8] = []
                text.reserveCapacity(frames.reduce(2) { $0 + $1.utf8.count + 3 })
                JSONWriter.strings(frames, into: &text)
                return text
            }
        report.stack = nil
        self.projectID = projectID
        self.report = report
        self.signature = signature
        self.quota = quota
        self.scrubbed = scrubbed
        estimatedBytes = Self.estimatedBytes(report, signature, stack)
    }

    var key: ReportKey { ReportKey(project: projectID, id: report.id) }
    var groupKey: GroupKey { GroupKey(project: projectID, signature: signature.hash) }

    /// About what this report weighs in the ingest statements, for the batch's byte bound:
    /// the UTF-8 bytes of its text fields plus a fixed share for ids, numbers and field names.
    /// Counted, not encoded (`utf8.count` of a native string is O(1)); escaping can make the
    /// encoded text up to 6 times larger (a control character becomes `\u00XX`), which the
    /// default bound allows for (docs/server.md). Counted once, when the item is made: the
    /// batcher bounds a batch by it, and the commit cuts its statements by it.
    let estimatedBytes: Int

    private static func estimatedBytes(_ r: Report, _ signature: Signature, _ stack: [UInt8]?) -> Int {
        var bytes = 256 + r.reason.utf8.count + signature.title.utf8.count + signature.normalizedReason.utf8.count
        bytes += r.app.id.utf8.count + r.app.version.utf8.count + (r.app.build?.utf8.count ?? 0)
        if let device = r.device {
            bytes += (device.os?.utf8.count ?? 0) + (device.osVersion?.utf8.count ?? 0)
            bytes += (device.model?.utf8.count ?? 0) + (device.id?.utf8.count ?? 0)
        }
        bytes += stack?.count ?? 0
        for part in r.fingerprint ?? [] { bytes += part.utf8.count + 3 }
        for (key, value) in r.context ?? [:] { bytes += key.utf8.count + value.utf8.count + 6 }
        return bytes
    }
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
    /// A validated report of `project`, scrubbed by `scrubber` (the project's, data-protection.md)
    /// and then signed: scrubbed and grouped the same way whichever door (`/v1/reports`, the
    /// Sentry routes, Apple's reports) it came in by.
    convenience init(project: ProjectRef, report: Report, scrubber: ReportScrubber? = nil, quota: QuotaClaim? = nil) {
        var report = report
        let scrubbed = scrubber?.scrub(&report) ?? false
        let signature = Grouping.signature(
            kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
            version: project.groupingVersion)
        self.init(projectID: project.id, report: report, signature: signature, quota: quota, scrubbed: scrubbed)
    }
}
