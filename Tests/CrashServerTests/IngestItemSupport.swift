import CrashGrouping
import CrashWire
import Foundation
import Testing

@testable import CrashServer

/// A custom-kind report of app "a" 1 for project 1, grouped by `reason`: the unit of the
/// queue and batcher tests.
func ingestItem(_ id: UUID = UUID(), stack: [String]? = nil, reason: String = "r") -> IngestItem {
    var report = Report(id: id, kind: .custom, reason: reason, app: AppInfo(id: "a", version: "1"))
    report.stack = stack
    return IngestItem(
        projectID: 1, report: report,
        signature: Grouping.signature(kind: .custom, reason: reason, stack: nil, fingerprint: nil, version: .v1))
}

/// Reasons of two groups in different lanes of two.
func reasonsInTwoLanes() throws -> (String, String) {
    let lane = { (reason: String) in IngestLanes.lane(of: [ingestItem(reason: reason)], lanes: 2) }
    let first = "Bug0 crashed"
    let other = try #require((1..<64).map { "Bug\($0) crashed" }.first { lane($0) != lane(first) })
    return (first, other)
}
