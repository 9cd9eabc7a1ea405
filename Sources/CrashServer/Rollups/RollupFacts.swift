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
        var table = RollupFactTable(keepingDevices: true)
        try table.append(buffer, project: project)
        facts.reserveCapacity(facts.count + table.reports.count)
        for r in table.reports {
            let t = table.texts
            facts.append(
                RollupFact(
                    project: r.project, group: r.group, time: r.time, fatal: r.fatal, app: t[Int(r.app)], version: t[Int(r.version)],
                    os: t[Int(r.os)], model: t[Int(r.model)], kind: t[Int(r.kind)], environment: t[Int(r.environment)],
                    device: t[Int(r.device)]))
        }
    }
}

/// Rollup facts as an aggregator cycle folds them: each distinct text of all its rows once
/// (`texts`, by id), and each report as the ids of its texts and its device's sketch register.
///
/// A `rollup_pending.facts` value holds each of its texts once; decoding makes a `String` of a
/// text, finds its id (one hash) or its device register (one SHA-256), only the first time a
/// report of the value uses it, so a report costs a few integer reads and array lookups.
struct RollupFactTable {
    struct Report {
        var project: Int64
        var group: Int64
        var time: Date
        var fatal: Bool
        /// Ids in ``RollupFactTable/texts``.
        var app: Int32, version: Int32, os: Int32, model: Int32, kind: Int32, environment: Int32
        /// The id of the device id among the texts when the table keeps devices, else -1.
        var device: Int32
        /// The device sketch register (``DeviceSketch/register(for:)``) as `index << 8 | rank`;
        /// 0 for no device id (a rank is at least 1).
        var register: UInt32

        /// The register as ``DeviceSketch`` takes it; nil for no device id.
        var deviceRegister: (index: Int, rank: UInt8)? {
            register == 0 ? nil : (Int(register >> 8), UInt8(truncatingIfNeeded: register))
        }
    }

    /// The distinct texts, in the order first used: `texts[id]`. ``BatchText/fixed`` comes first.
    private(set) var texts: [String] = []
    private var ids: [String: Int32] = [:]
    private(set) var reports: [Report] = []
    /// Whether device ids are texts too (``Report/device``); the fold needs only their registers.
    let keepingDevices: Bool

    init(keepingDevices: Bool = false) {
        self.keepingDevices = keepingDevices
        for text in BatchText.fixed { _ = id(text) }
    }

    /// The id of `text`, made when it is new.
    mutating func id(_ text: String) -> Int32 {
        let next = Int32(texts.count)
        // One hash: the default is stored when the text is new.
        let found = Self.read(&ids[text, default: next])
        if found == next { texts.append(text) }
        return found
    }

    @inline(__always) private static func read(_ value: inout Int32) -> Int32 { value }

    /// The id of a text, if any report used it.
    func id(of text: String) -> Int32? { ids[text] }

    static func register(_ device: String) -> UInt32 {
        guard !device.isEmpty else { return 0 }
        let (index, rank) = DeviceSketch.register(for: device)
        return UInt32(index) << 8 | UInt32(rank)
    }

    /// Adds one fact.
    mutating func append(_ fact: RollupFact) {
        reports.append(
            Report(
                project: fact.project, group: fact.group, time: fact.time, fatal: fact.fatal, app: id(fact.app), version: id(fact.version),
                os: id(fact.os), model: id(fact.model), kind: id(fact.kind), environment: id(fact.environment),
                device: keepingDevices ? id(fact.device) : -1, register: Self.register(fact.device)))
    }

    /// Adds the facts of `project` that `buffer` (``RollupFacts``'s layout) holds.
    mutating func append(_ buffer: ByteBuffer, project: Int64) throws {
        let whole = buffer
        var buffer = buffer
        func failure(_ what: String) -> RollupFactsError { RollupFactsError(description: "rollup facts of project \(project): \(what)") }
        guard buffer.readInteger(as: UInt8.self) == RollupFacts.format, let textCount = buffer.readInteger(as: UInt32.self) else {
            throw failure("unknown format")
        }
        // Where each of the value's texts is; read when a report first uses it.
        var spans: [(at: Int, length: Int)] = []
        spans.reserveCapacity(Int(textCount))
        for _ in 0..<textCount {
            guard let length = buffer.readInteger(as: UInt32.self), buffer.readableBytes >= Int(length) else {
                throw failure("truncated text")
            }
            spans.append((buffer.readerIndex, Int(length)))
            buffer.moveReaderIndex(forwardBy: Int(length))
        }
        guard let count = buffer.readInteger(as: UInt32.self) else { throw failure("no report count") }
        // Per text of the value: its id here (-1: not yet), its register (UInt32.max: not yet).
        var textIDs = [Int32](repeating: -1, count: spans.count)
        var registers = [UInt32](repeating: .max, count: spans.count)
        func text(_ place: Int) -> String { whole.getString(at: spans[place].at, length: spans[place].length)! }
        func textID() throws -> Int32 {
            guard let place = buffer.readInteger(as: UInt32.self).map(Int.init), place < spans.count else {
                throw failure("a text out of range")
            }
            if textIDs[place] < 0 { textIDs[place] = id(text(place)) }
            return textIDs[place]
        }
        reports.reserveCapacity(reports.count + Int(count))
        for _ in 0..<count {
            guard let group = buffer.readInteger(as: Int64.self), let bits = buffer.readInteger(as: UInt64.self),
                let fatal = buffer.readInteger(as: UInt8.self), buffer.readableBytes >= 7 * 4
            else { throw failure("truncated report") }
            let (app, version, os, model, kind, environment) = (try textID(), try textID(), try textID(), try textID(), try textID(), try textID())
            guard let device = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self).map(Int.init), device < spans.count else {
                throw failure("a text out of range")
            }
            if registers[device] == .max { registers[device] = Self.register(text(device)) }
            let deviceID = keepingDevices ? try textID() : -1
            if !keepingDevices { buffer.moveReaderIndex(forwardBy: 4) }
            reports.append(
                Report(
                    project: project, group: group, time: Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits)), fatal: fatal != 0,
                    app: app, version: version, os: os, model: model, kind: kind, environment: environment, device: deviceID,
                    register: registers[device]))
        }
    }
}

/// A `rollup_pending.facts` value this server cannot read.
struct RollupFactsError: Error, CustomStringConvertible {
    var description: String
}
