import CrashWire
import Foundation
import NIOCore

/// What the rollups need of one stored report: its project and group, its client time, whether
/// it was fatal, and the text values the rollups are keyed by (an absent OS or model is `""`,
/// an absent environment the default one, no device id `""`).
struct RollupFact: Sendable, Equatable {
    var project: Int64
    var group: Int64
    var time: Date
    var fatal: Bool
    var app: String
    var version: String
    var os: String
    var model: String
    var kind: String
    var environment: String
    var device: String

    init(
        project: Int64, group: Int64, time: Date, fatal: Bool, app: String, version: String, os: String, model: String, kind: String,
        environment: String, device: String
    ) {
        (self.project, self.group, self.time, self.fatal) = (project, group, time, fatal)
        (self.app, self.version, self.os, self.model, self.kind, self.environment, self.device) =
            (app, version, os, model, kind, environment, device)
    }

    /// The facts of `item`, stored in `group`.
    init(_ item: IngestItem, group: Int64) {
        let r = item.report
        self.init(
            project: item.projectID, group: group, time: r.timestamp, fatal: r.fatal == true, app: r.app.id, version: r.app.version,
            os: r.device?.os ?? "", model: r.device?.model ?? "", kind: r.kind.rawValue,
            environment: r.environment ?? ReportLimits.defaultEnvironment, device: r.device?.id ?? "")
    }

    /// The device sketch register of the report's device id; nil without one.
    var register: (index: Int, rank: UInt8)? { device.isEmpty ? nil : DeviceSketch.register(for: device) }
}

/// The facts of one project's reports as one `rollup_pending.facts` value: each distinct text
/// once, then each report as fixed-width numbers that point at its texts. One value per project
/// and statement of an ingest batch (``IngestSQL/WriteBatch``); the aggregator decodes them
/// (``PostgresRollupStore``).
///
/// Layout (big-endian): format `1` (UInt8); the count of texts (UInt32), each its UTF-8 length
/// (UInt32) and bytes; the count of reports (UInt32), each its group (Int64), its time (the bits
/// of `timeIntervalSinceReferenceDate`, so the time comes back exactly), fatal (UInt8) and the
/// places of its app, version, OS, model, kind, environment and device id among the texts
/// (UInt32 each).
enum RollupFacts {
    static let format: UInt8 = 1

    /// The facts of one project (every fact's `project` is the same), encoded.
    static func encode(_ facts: some Collection<RollupFact>) -> ByteBuffer {
        var places: [String: UInt32] = [:]
        var texts: [String] = []
        var reports = ByteBuffer()
        reports.reserveCapacity(facts.count * 45)
        func place(_ text: String) -> UInt32 {
            let next = UInt32(texts.count)
            let found = Self.read(&places[text, default: next])
            if found == next { texts.append(text) }
            return found
        }
        for fact in facts {
            reports.writeInteger(fact.group)
            reports.writeInteger(fact.time.timeIntervalSinceReferenceDate.bitPattern)
            reports.writeInteger(UInt8(fact.fatal ? 1 : 0))
            for text in [fact.app, fact.version, fact.os, fact.model, fact.kind, fact.environment, fact.device] {
                reports.writeInteger(place(text))
            }
        }
        var out = ByteBuffer()
        out.reserveCapacity(reports.readableBytes + texts.reduce(9) { $0 + 4 + $1.utf8.count })
        out.writeInteger(format)
        out.writeInteger(UInt32(texts.count))
        for text in texts {
            out.writeInteger(UInt32(text.utf8.count))
            out.writeString(text)
        }
        out.writeInteger(UInt32(facts.count))
        out.writeImmutableBuffer(reports)
        return out
    }

    @inline(__always) private static func read(_ value: inout UInt32) -> UInt32 { value }

    /// The facts `buffer` holds, of `project`, appended to `facts`.
    static func decode(_ buffer: ByteBuffer, project: Int64, into facts: inout [RollupFact]) throws {
        var buffer = buffer
        guard buffer.readInteger(as: UInt8.self) == format, let textCount = buffer.readInteger(as: UInt32.self) else {
            throw RollupFactsError(description: "rollup facts of project \(project): unknown format")
        }
        var texts: [String] = []
        texts.reserveCapacity(Int(textCount))
        for _ in 0..<textCount {
            guard let length = buffer.readInteger(as: UInt32.self), let text = buffer.readString(length: Int(length)) else {
                throw RollupFactsError(description: "rollup facts of project \(project): truncated text")
            }
            texts.append(text)
        }
        guard let count = buffer.readInteger(as: UInt32.self) else {
            throw RollupFactsError(description: "rollup facts of project \(project): no report count")
        }
        facts.reserveCapacity(facts.count + Int(count))
        for _ in 0..<count {
            guard let group = buffer.readInteger(as: Int64.self), let bits = buffer.readInteger(as: UInt64.self),
                let fatal = buffer.readInteger(as: UInt8.self)
            else { throw RollupFactsError(description: "rollup facts of project \(project): truncated report") }
            var values: [String] = []
            values.reserveCapacity(7)
            for _ in 0..<7 {
                guard let place = buffer.readInteger(as: UInt32.self), Int(place) < texts.count else {
                    throw RollupFactsError(description: "rollup facts of project \(project): a text out of range")
                }
                values.append(texts[Int(place)])
            }
            facts.append(
                RollupFact(
                    project: project, group: group, time: Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits)), fatal: fatal != 0,
                    app: values[0], version: values[1], os: values[2], model: values[3], kind: values[4], environment: values[5],
                    device: values[6]))
        }
    }
}

/// A `rollup_pending.facts` value this server cannot read.
struct RollupFactsError: Error, CustomStringConvertible {
    var description: String
}
