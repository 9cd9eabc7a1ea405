import Foundation
import NIOCore
import Testing

@testable import CrashServer

/// The facts as a cycle folds them: texts by id, each report's device as its sketch register.
@Suite struct RollupFactTableTests {
    static func facts(project: Int64, count: Int) -> [RollupFact] {
        (0..<count).map { (i: Int) -> RollupFact in
            let time = Date(timeIntervalSince1970: 1_800_000_000.25 + Double(i))
            let os: String = i % 5 == 0 ? "" : "iOS"
            let device: String = i % 7 == 0 ? "" : "install-\(i % 6)"
            return RollupFact(
                project: project, group: Int64(i % 3), time: time, fatal: i % 2 == 0, app: "com.example.long-application-id",
                version: "2.\(i % 4)", os: os, model: "iPhone15,\(i % 2)", kind: "signal", environment: "production", device: device)
        }
    }

    /// Several values decode into one table: every report keeps its texts through the ids and its
    /// device as the register the sketch would take, and device ids are not among the texts.
    @Test func valuesDecodeIntoIdsAndRegisters() throws {
        let (a, b) = (Self.facts(project: 1, count: 40), Self.facts(project: 2, count: 25))
        var table = RollupFactTable()
        try table.append(RollupFacts.encode(a), project: 1)
        try table.append(RollupFacts.encode(b), project: 2)
        #expect(table.reports.count == a.count + b.count)
        for (fact, report) in zip(a + b, table.reports) {
            let t = table.texts
            #expect(report.project == fact.project && report.group == fact.group && report.time == fact.time && report.fatal == fact.fatal)
            #expect(
                [t[Int(report.app)], t[Int(report.version)], t[Int(report.os)], t[Int(report.model)], t[Int(report.kind)]]
                    == [fact.app, fact.version, fact.os, fact.model, fact.kind])
            #expect(t[Int(report.environment)] == fact.environment && report.device == -1)
            let expected = fact.device.isEmpty ? nil : DeviceSketch.register(for: fact.device)
            #expect(report.deviceRegister?.index == expected?.index && report.deviceRegister?.rank == expected?.rank)
        }
        #expect(Set(table.texts).count == table.texts.count)
        #expect(!table.texts.contains { $0.hasPrefix("install-") })
        let text = BatchText(table)
        for (report, ranks) in zip(table.reports, text.reports) { #expect(text[ranks.version] == table.texts[Int(report.version)]) }
    }

    /// A value whose report points past its texts is refused.
    @Test func aPlaceOutOfRangeIsRefused() throws {
        var encoded = RollupFacts.encode(Self.facts(project: 1, count: 1))
        encoded.setInteger(UInt32(99), at: encoded.writerIndex - 4)
        var table = RollupFactTable()
        #expect(throws: RollupFactsError.self) { try table.append(encoded, project: 1) }
    }
}
