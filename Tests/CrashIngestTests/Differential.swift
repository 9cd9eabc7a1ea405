import CrashGrouping
import CrashWire
import Foundation
import SeededRandom

@testable import CrashIngest

/// What an ingest decoder made of a body: refused (status, message) or one slot per report.
enum Verdict: Equatable, CustomStringConvertible {
    case refused(Int, String)
    case batch([Slot])

    /// A valid report, or the message that rejected it.
    struct Slot: Equatable {
        var report: Report?
        var error: String?
    }

    var status: Int {
        switch self {
        case .refused(let status, _): return status
        case .batch: return 202
        }
    }

    var description: String {
        switch self {
        case .refused(let status, let message): return "\(status) \(message)"
        case .batch(let slots):
            return "202 " + slots.map { $0.error ?? "ok" }.joined(separator: " | ")
        }
    }

    /// The JSONDecoder path the server used before the streaming reader.
    static func legacy(_ bytes: [UInt8], now: Date) -> Verdict {
        do {
            let batch = try IncomingBatch.decode(bytes)
            guard (1...WireProtocol.maxReportsPerBatch).contains(batch.reports.count) else {
                return .refused(400, "\"reports\" has \(batch.reports.count) reports")
            }
            return .batch(
                batch.reports.map { slot in
                    switch slot.result {
                    case .failure(let failure): return Slot(error: failure.message)
                    case .success(let report):
                        if let problem = report.validationError(now: now) { return Slot(error: problem) }
                        return Slot(report: report)
                    }
                })
        } catch let error as IngestError {
            return .refused(error.status, error.message)
        } catch {
            return .refused(500, "\(error)")
        }
    }

    /// The streaming pipeline, fed in chunks of `chunk` bytes (all at once when nil).
    static func streaming(_ bytes: [UInt8], now: Date, chunk: Int? = nil) -> Verdict {
        do {
            let reader = try IngestBodyReader(contentEncoding: nil, maxBodyBytes: .max, maxDecompressedBytes: 64 << 20)
            let size = chunk ?? max(bytes.count, 1)
            for start in stride(from: 0, to: bytes.count, by: size) {
                try reader.feed(Array(bytes[start..<min(start + size, bytes.count)]))
            }
            let batch = try reader.finish(now: now, version: .newProjectDefault)
            var slots = [Slot](repeating: Slot(), count: batch.count)
            for item in batch.accepted {
                // The reader keeps the frames only as the stack's JSON text, and signs them where
                // they lie in the body: the signature must be the one of the frames as strings.
                var report = item.report
                let wasNil = report.stack == nil
                report.stack = item.stackJSON.flatMap { try? JSONDecoder().decode([String].self, from: Data($0)) }
                let signature = Grouping.signature(
                    kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
                    version: .newProjectDefault)
                slots[item.index] =
                    !wasNil || (item.stackJSON == nil) != (report.stack == nil)
                    ? Slot(error: "stackJSON is not the stack")
                    : signature != item.signature
                        ? Slot(error: "signed otherwise than the frames as strings")
                        : Slot(report: report)
            }
            for rejection in batch.rejected { slots[rejection.index] = Slot(error: rejection.error) }
            return .batch(slots)
        } catch {
            return .refused(error.status, error.message)
        }
    }
}

/// A JSON value, rendered with varying white space and escapes.
indirect enum JSON {
    case string(String)
    case number(String)
    case bool(Bool)
    case null
    case array([JSON])
    case object([(String, JSON)])
}

struct JSONRenderer {
    var rng: SplitMix64

    mutating func render(_ value: JSON) -> String {
        var out = ""
        write(value, to: &out)
        return out
    }

    private mutating func space() -> String {
        switch Int.random(in: 0..<12, using: &rng) {
        case 0: return " "
        case 1: return "\n  "
        case 2: return "\t"
        case 3: return "\r\n"
        default: return ""
        }
    }

    private mutating func write(_ value: JSON, to out: inout String) {
        switch value {
        case .string(let text): writeString(text, to: &out)
        case .number(let literal): out += literal
        case .bool(let flag): out += flag ? "true" : "false"
        case .null: out += "null"
        case .array(let elements):
            out += "[" + space()
            for (n, element) in elements.enumerated() {
                if n > 0 { out += space() + "," + space() }
                write(element, to: &out)
            }
            out += space() + "]"
        case .object(let members):
            out += "{" + space()
            for (n, (key, member)) in members.enumerated() {
                if n > 0 { out += space() + "," + space() }
                writeString(key, to: &out)
                out += space() + ":" + space()
                write(member, to: &out)
            }
            out += space() + "}"
        }
    }

    private mutating func writeString(_ text: String, to out: inout String) {
        out += "\""
        let escapeRate = Int.random(in: 0..<4, using: &rng)  // some strings escape much
        for scalar in text.unicodeScalars {
            let escapeThis = escapeRate == 0 && Int.random(in: 0..<3, using: &rng) == 0
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "/" where escapeThis: out += "\\/"
            case "\n" where !escapeThis: out += "\\n"
            case "\t" where !escapeThis: out += "\\t"
            case "\u{8}": out += "\\b"
            case "\u{C}": out += "\\f"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || escapeThis {
                    out += Self.unicodeEscape(scalar, upper: Bool.random(using: &rng))
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }

    static func unicodeEscape(_ scalar: Unicode.Scalar, upper: Bool) -> String {
        func hex(_ unit: UInt32) -> String {
            let digits = String(unit, radix: 16, uppercase: upper)
            return "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
        }
        guard scalar.value > 0xFFFF else { return hex(scalar.value) }
        let v = scalar.value - 0x10000
        return hex(0xD800 + (v >> 10)) + hex(0xDC00 + (v & 0x3FF))
    }
}

/// Random ingest bodies: mostly valid reports, each field sometimes missing, null, of the
/// wrong type, empty, at or just over its limit; unknown keys; elements that are not
/// objects. At most one field of a report is of the wrong type inside `context` (the old
/// decoder checked context entries in a per-process random order).
struct BodyGenerator {
    var rng: SplitMix64
    let now: Date

    private mutating func chance(_ n: Int) -> Bool { Int.random(in: 0..<n, using: &rng) == 0 }

    private mutating func text(maxLength: Int = 12) -> String {
        let alphabet: [String] = [
            "a", "b", "Z", "0", "7", " ", "é", "€", "😀", "日", "\n", "\t", "\"", "\\", "/", ".", ":", "[", "]", "{",
            "0x7f8740e21bb0", "\u{1}", "\u{7F}", "\u{FFFD}",
        ]
        let count = Int.random(in: 0...maxLength, using: &rng)
        return (0..<count).map { _ in alphabet.randomElement(using: &rng)! }.joined()
    }

    /// A string near `limit` UTF-8 bytes: at, just over, or far over.
    private mutating func sized(_ limit: Int) -> String {
        let target = [limit - 1, limit, limit + 1, limit + 3, limit * 3].randomElement(using: &rng)!
        var s = String(repeating: "x", count: max(0, target - 4))
        s += ["éé", "€x", "😀", "ab"].randomElement(using: &rng)!
        return s
    }

    private mutating func wrongType() -> JSON {
        [JSON.number("42"), .number("-1.5e3"), .bool(true), .array([]), .object([]), .array([.string("x")])]
            .randomElement(using: &rng)!
    }

    /// A field's value: usually `good`, sometimes null or of the wrong type.
    private mutating func maybeBroken(_ good: JSON, breakRate: Int = 14) -> JSON? {
        switch Int.random(in: 0..<breakRate, using: &rng) {
        case 0: return nil
        case 1: return .null
        case 2: return wrongType()
        default: return good
        }
    }

    /// Frames as SDKs write them (app and system, marked or not, with addresses), which
    /// the v2 signature selects among, sometimes with random text after them.
    private mutating func frame() -> String {
        let frames = [
            "0   MyApp   0x0000000100a1b2c3 -[Foo bar:] + 12", "1   UIKitCore   0x00000001a2b3c4d5 -[UIApplication sendEvent:] + 44",
            "main (app) [app]", "objc_exception_throw (libobjc.A.dylib) [system]", "__pthread_kill + 8",
            "CrashGuard.Guard.run (CrashGuard)", "x (é€😀) [app]", "Demo.parse(_:) (Demo) [app]",
        ]
        return frames.randomElement(using: &rng)! + (chance(4) ? text(maxLength: 4) : "")
    }

    mutating func stringList(maxCount: Int, limit: Int) -> JSON {
        var count = Int.random(in: 0...4, using: &rng)
        if chance(3) { count = Int.random(in: 5...30, using: &rng) }
        if chance(10) { count = [maxCount, maxCount + 1, maxCount + 5].randomElement(using: &rng)! }
        var elements: [JSON] = (0..<count).map { _ in .string(chance(2) ? frame() : text()) }
        if !elements.isEmpty, chance(6) {
            elements[Int.random(in: 0..<elements.count, using: &rng)] = .string(sized(limit))
        }
        if !elements.isEmpty, chance(15) {
            elements[Int.random(in: 0..<elements.count, using: &rng)] = .string(text(maxLength: 3) + "\u{0}")
        }
        if !elements.isEmpty, chance(12) {
            elements[Int.random(in: 0..<elements.count, using: &rng)] = chance(2) ? .null : .number("5")
        }
        return .array(elements)
    }

    mutating func report() -> JSON {
        if chance(25) { return [JSON.number("42"), .string("x"), .null, .array([]), .bool(false)].randomElement(using: &rng)! }
        var members: [(String, JSON?)] = []
        var id = UUID().uuidString
        if chance(2) { id = id.lowercased() }
        if chance(20) { id = "nope" }
        members.append(("id", maybeBroken(.string(id))))
        var time = now.addingTimeInterval(-Double(Int.random(in: 0...(29 * 86_400), using: &rng)))
        if chance(20) { time = now.addingTimeInterval(-31 * 86_400) }
        if chance(20) { time = now.addingTimeInterval(2 * 86_400) }
        var stamp = RFC3339.format(time)
        if chance(20) { stamp = "yesterday" }
        members.append(("timestamp", maybeBroken(.string(stamp))))
        var kind = ReportKind.allCases.randomElement(using: &rng)!.rawValue
        if chance(20) { kind = "segfault" }
        members.append(("kind", maybeBroken(.string(kind))))
        var reason = text(maxLength: 30)
        if chance(8) { reason = sized(ReportLimits.reasonBytes.upperBound) }
        if chance(20) { reason = "" }
        members.append(("reason", maybeBroken(.string(reason))))
        if chance(2) {
            members.append(("stack", maybeBroken(stringList(maxCount: ReportLimits.maxFrames, limit: ReportLimits.frameBytes))))
        }
        if chance(3) { members.append(("fatal", maybeBroken(.bool(Bool.random(using: &rng))))) }
        var app: [(String, JSON)] = []
        if !chance(15) { app.append(("id", chance(10) ? .string(sized(128)) : .string("com.example." + text(maxLength: 5)))) }
        if !chance(15) { app.append(("version", chance(15) ? .string("") : .string("1." + String(Int.random(in: 0...20, using: &rng))))) }
        if chance(2) { app.append(("build", maybeBroken(.string(chance(8) ? sized(128) : "7")) ?? .null)) }
        members.append(("app", maybeBroken(.object(app), breakRate: 30)))
        if chance(2) {
            var device: [(String, JSON)] = []
            for name in ["os", "osVersion", "model", "id"] where chance(2) {
                device.append((name, maybeBroken(.string(chance(10) ? sized(128) : text(maxLength: 6))) ?? .null))
            }
            members.append(("device", maybeBroken(.object(device), breakRate: 30)))
        }
        if chance(3) {
            members.append(("fingerprint", maybeBroken(stringList(maxCount: 8, limit: ReportLimits.fingerprintPartBytes))))
        }
        if chance(2) {
            var count = Int.random(in: 0...3, using: &rng)
            if chance(10) { count = [64, 65, 70].randomElement(using: &rng)! }
            var context: [(String, JSON)] = (0..<count).map { n in ("k\(n)-" + text(maxLength: 3), .string(text())) }
            if !context.isEmpty, chance(5) {
                let n = Int.random(in: 0..<context.count, using: &rng)
                context[n].1 = .string(sized(ReportLimits.contextValueBytes))
            }
            if !context.isEmpty, chance(8) {
                let n = Int.random(in: 0..<context.count, using: &rng)
                context[n].0 = "key" + sized(ReportLimits.contextKeyBytes)
            }
            if !context.isEmpty, chance(10) {
                context[Int.random(in: 0..<context.count, using: &rng)].1 = chance(2) ? .null : .number("5")
            }
            members.append(("context", maybeBroken(.object(context), breakRate: 20)))
        }
        if chance(4) { members.append(("extra" + text(maxLength: 3), nested(depth: Int.random(in: 0...6, using: &rng)))) }
        members.shuffle(using: &rng)
        return .object(members.compactMap { key, value in value.map { (key, $0) } })
    }

    private mutating func nested(depth: Int) -> JSON {
        guard depth > 0 else { return [JSON.number("1e999"), .string(text()), .null, .bool(true)].randomElement(using: &rng)! }
        return chance(2) ? .array([nested(depth: depth - 1), .number("0")]) : .object([("x", nested(depth: depth - 1))])
    }

    mutating func body() -> [UInt8] {
        let count = chance(30) ? 0 : Int.random(in: 1...5, using: &rng)
        var top: [(String, JSON)] = [("reports", .array((0..<count).map { _ in report() }))]
        if chance(5) { top.append(("meta", nested(depth: 3))) }
        top.shuffle(using: &rng)
        var renderer = JSONRenderer(rng: SplitMix64(seed: rng.next()))
        return Array(renderer.render(.object(top)).utf8)
    }
}
