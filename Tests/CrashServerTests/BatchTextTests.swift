import CrashGrouping
import CrashWire
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The ranks rollup keys hold instead of strings: they must sort as the strings do (the lock
/// order of concurrent batches) and stand for exactly their string.
@Suite struct BatchTextTests {
    static func item(app: String, version: String, os: String?, model: String?, kind: ReportKind) -> IngestItem {
        let report = Report(
            kind: kind, reason: "boom", app: AppInfo(id: app, version: version),
            device: os == nil && model == nil ? nil : DeviceInfo(os: os, model: model))
        return IngestItem(
            projectID: 1, report: report,
            signature: Grouping.signature(kind: kind, reason: "boom", stack: nil, fingerprint: nil, version: .v2))
    }

    @Test func ranksStandForTheirStringsAndSortAsThey() {
        let items = [
            Self.item(app: "com.b", version: "1.10", os: "iOS", model: "iPhone15,2", kind: .signal),
            Self.item(app: "com.a", version: "1.9", os: nil, model: nil, kind: .exception),
            Self.item(app: "com.b", version: "2.0-é", os: "Android", model: "Pixel", kind: .custom),
            Self.item(app: "com.a", version: "1.10", os: "iOS", model: "", kind: .signal),
        ]
        let text = BatchText(items)
        for (item, ranks) in zip(items, text.reports) {
            let r = item.report
            #expect(text[ranks.app] == r.app.id)
            #expect(text[ranks.version] == r.app.version)
            #expect(text[ranks.os] == r.device?.os ?? "")
            #expect(text[ranks.model] == r.device?.model ?? "")
            #expect(text[ranks.kind] == r.kind.rawValue)
        }
        // Every value once, in the strings' order, with the fixed ones.
        #expect(text.strings == Set(text.strings).sorted())
        for value in BatchText.fixed { #expect(text.rank(of: value).map { text[$0] } == value) }
        #expect(text[text.all] == "" && text[text.versionFacet] == "version")
        #expect(text.rank(of: "not in the batch") == nil)
        let versions = text.reports.map(\.version)
        for a in versions {
            for b in versions { #expect((a < b) == (text[a] < text[b])) }
        }
    }

    @Test func anEmptyBatchHasTheFixedValues() {
        let text = BatchText([])
        #expect(text.reports.isEmpty)
        #expect(text.strings == BatchText.fixed.sorted())
    }
}
