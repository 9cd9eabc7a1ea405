import CrashWire
import Crypto
import Foundation

/// The reports of one body of `POST /v1/apple/reports` (the contract, `apple.md`, "The Apple
/// door"): what to store and what to list as rejected.
public struct AppleReportBatch: Sendable {
    /// Which of Apple's formats the body was.
    public enum Format: Sendable, Hashable {
        /// A JSON `.ips` crash report (iOS 15+, macOS 12+): a header line and a body.
        case ips
        /// A MetricKit `MXDiagnosticPayload` (`jsonRepresentation()`).
        case metricKit
    }

    public var format: Format
    /// Crashes in the body: 1 for an `.ips`, the crash diagnostics of a MetricKit payload.
    public var count: Int
    /// Valid reports, in body order (`fatal: true`).
    public var accepted: [Report]
    /// Crashes that could not become a report, by their index among the body's crashes, each
    /// naming its field.
    public var rejected: [IngestResponse.Rejection]
}

/// Apple's own crash reports as CrashGuard reports: the `.ips` JSON crash report and the
/// MetricKit diagnostic payload, mapped as the contract's table says (`apple.md`). Pure: bytes
/// in, reports out, no HTTP and no database, so every row of the table is tested on its own.
///
/// Frames are written in Apple's unsymbolicated form, `"<i> <image> 0x<address> 0x<load
/// address> + <offset>"` (or with the symbol the device resolved, `"<i> <image> 0x<address>
/// <symbol> + <offset>"`), the form grouping reads as image + offset, and `context` carries an
/// `image.<n>` entry (`0x<load address> <size> <uuid> <name>`) per image the stack's frames
/// fall in, for symbolication by UUID at read time.
///
/// A body is first read as one JSON text into a ``JSONTree``, without recursion: MetricKit nests
/// two levels per frame of a call stack (a 1,000-frame stack is 2,000 levels, past the limits
/// of Foundation's reader and writer), so its call stacks are walked and its diagnostics
/// hashed in the tree. The rest of a payload, and an `.ips` (two texts, its frames in flat
/// lists), is read as Foundation values.
public enum AppleCrashReports {
    /// The `bug_type` of a crash report; every other `.ips` (hangs, jetsam, ...) is refused.
    public static let crashBugType = "309"

    /// Reads one body received at `receivedAt`: an `.ips` crash report or a MetricKit payload.
    /// Throws a 400 (``IngestError/badRequest(_:)``) for a body that is neither, naming why.
    public static func read(_ bytes: [UInt8], receivedAt: Date) throws(IngestError) -> AppleReportBatch {
        guard bytes.contains(where: { !isSpace($0) }) else { throw .badRequest("body is empty") }
        if let tree = JSONTree(bytes[...]) {
            // The call stacks (`callStackTree`, at any depth) stay in the tree: MetricKit nests
            // two levels per frame; everything else is shallow.
            guard let object = tree.foundationValue(tree.root, omitting: ["callStackTree"]) as? [String: Any] else {
                throw .badRequest("body is neither an .ips crash report nor a MetricKit payload: not a JSON object")
            }
            if isMetricKit(object) { return try metricKit(object, tree: tree, receivedAt: receivedAt) }
            if let bugType = text(object["bug_type"]) {
                guard bugType == crashBugType else { throw notACrash(bugType) }
                throw .badRequest(".ips: the body line after the header line is missing")
            }
            throw .badRequest(
                "body is neither an .ips crash report (a header line with bug_type) nor a MetricKit payload (crashDiagnostics)")
        }
        return try ips(bytes, receivedAt: receivedAt)
    }

    /// A MetricKit payload names its window or one of its diagnostic lists.
    static func isMetricKit(_ object: [String: Any]) -> Bool {
        object["timeStampBegin"] != nil || object["timeStampEnd"] != nil || object["crashDiagnostics"] != nil
            || object["hangDiagnostics"] != nil || object["cpuExceptionDiagnostics"] != nil
            || object["diskWriteExceptionDiagnostics"] != nil || object["appLaunchDiagnostics"] != nil
    }

    /// The JSON value of `bytes`, or nil when they are not one JSON text.
    static func json(_ bytes: ArraySlice<UInt8>) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(bytes), options: [])
    }

    /// The refusal of an `.ips` of another kind than a crash report.
    static func notACrash(_ bugType: String) -> IngestError {
        .badRequest(".ips: bug_type \(bugType) is not a crash report (\(crashBugType)); only crash reports are taken")
    }

    static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 }

    // MARK: Building reports

    /// A crash being mapped: the fields of a report before the limits are applied.
    struct Crash {
        var id: UUID
        var timestamp: Date
        var kind: ReportKind
        var reasonLines: [String]
        var frames: [String]
        var appID: String?
        var appVersion: String?
        var appBuild: String?
        var device: DeviceInfo?
        /// `incident`, `exception.codes`, `termination.indicator`, in this order, when known.
        var context: [(String, String)]
        /// The images of the stack, in the order its frames first name them.
        var images: [Image]
    }

    /// An image a stack's frames fall in.
    struct Image {
        var base: UInt64
        /// 0 when the source does not say (MetricKit).
        var size: UInt64
        var uuid: String?
        var name: String
    }

    /// The report of `crash`, its texts cut to the contract's limits, or the rejection naming
    /// the field that cannot be read or is invalid.
    static func report(_ crash: Crash, index: Int, receivedAt: Date) -> Outcome {
        guard let version = crash.appVersion.flatMap(nonEmpty) else {
            return .rejected(.init(index: index, error: "app.version: the crash report names no app version"))
        }
        let appLimit = ReportLimits.appFieldBytes.upperBound
        let app = AppInfo(
            id: ReportLimits.clip(crash.appID.flatMap(nonEmpty) ?? "unknown", appLimit), version: ReportLimits.clip(version, appLimit),
            build: crash.appBuild.flatMap(nonEmpty).map { ReportLimits.clip($0, appLimit) })
        var reason = crash.reasonLines.filter { !$0.isEmpty }.joined(separator: "\n")
        if reason.isEmpty { reason = "unknown crash" }
        var context: [String: String] = [:]
        for (key, value) in crash.context where !value.isEmpty {
            context[key] = ReportLimits.clip(value, ReportLimits.contextValueBytes)
        }
        for (n, image) in crash.images.enumerated() where context.count < ReportLimits.maxContextEntries {
            let uuid = image.uuid.flatMap(nonEmpty)?.lowercased() ?? "-"
            context["image.\(n)"] = ReportLimits.clip(
                "0x\(String(image.base, radix: 16)) \(image.size) \(uuid) \(image.name)", ReportLimits.contextValueBytes)
        }
        let report = Report(
            id: crash.id,
            timestamp: crash.timestamp,
            kind: crash.kind,
            reason: ReportLimits.clip(reason, ReportLimits.reasonBytes.upperBound),
            stack: crash.frames.isEmpty ? nil : crash.frames.map { ReportLimits.clip($0, ReportLimits.frameBytes) },
            fatal: true,
            app: app,
            device: crash.device.map { device in
                let limit = ReportLimits.deviceFieldBytes
                return DeviceInfo(
                    os: device.os.map { ReportLimits.clip($0, limit) }, osVersion: device.osVersion.map { ReportLimits.clip($0, limit) },
                    model: device.model.map { ReportLimits.clip($0, limit) }, id: device.id.map { ReportLimits.clip($0, limit) })
            },
            context: context.isEmpty ? nil : context)
        if let problem = report.validationError(now: receivedAt) {
            return .rejected(.init(index: index, error: problem))
        }
        return .accepted(report)
    }

    /// A crash as a report, or why it is not one.
    enum Outcome {
        case accepted(Report)
        case rejected(IngestResponse.Rejection)
    }

    /// An unsymbolicated frame: `"<i> <image> 0x<address> 0x<base> + <offset>"`.
    static func frame(_ index: Int, image: String, base: UInt64, offset: UInt64) -> String {
        "\(index) \(image) 0x\(String(base &+ offset, radix: 16)) 0x\(String(base, radix: 16)) + \(offset)"
    }

    /// A frame the device named: `"<i> <image> 0x<address> <symbol> + <symbol offset>"`.
    static func frame(_ index: Int, image: String, address: UInt64, symbol: String, symbolOffset: UInt64) -> String {
        "\(index) \(image) 0x\(String(address, radix: 16)) \(symbol) + \(symbolOffset)"
    }

    // MARK: Fields

    /// `iPhone OS 17.2 (21C62)` as `("iOS", "17.2")`; `macOS 14.2 (23C64)` as `("macOS", "14.2")`.
    /// A text without a version is all name.
    static func operatingSystem(_ text: String) -> (name: String?, version: String?) {
        var words = text.split(separator: " ").map(String.init)
        if let last = words.last, last.hasPrefix("("), last.hasSuffix(")") { words.removeLast() }
        var version: String?
        if let last = words.last, let first = last.first, first.isNumber {
            version = last
            words.removeLast()
        }
        let name = words.joined(separator: " ")
        let names = [
            "iphone os": "iOS", "ios": "iOS", "ipados": "iPadOS", "mac os x": "macOS", "macos": "macOS", "os x": "macOS",
            "watch os": "watchOS", "watchos": "watchOS", "apple tvos": "tvOS", "tvos": "tvOS", "xros": "visionOS",
            "visionos": "visionOS",
        ]
        return (nonEmpty(names[name.lowercased()] ?? name), version)
    }

    /// Apple's times: `2026-03-17 22:50:41.6409 -0700` (`.ips`), `2020-10-26 19:27:00 +0000` or
    /// without a zone (MetricKit, read as UTC), and RFC 3339.
    static func appleTime(_ text: String) -> Date? {
        if let date = RFC3339.parse(text) { return date }
        let parts = text.split(separator: " ")
        guard parts.count == 2 || parts.count == 3 else { return nil }
        let day = parts[0].split(separator: "-").compactMap { Int($0) }
        let clock = parts[1].split(separator: ":")
        guard day.count == 3, clock.count == 3, let hour = Int(clock[0]), let minute = Int(clock[1]),
            let seconds = Double(clock[2]), seconds >= 0, seconds < 61
        else { return nil }
        var zone = 0
        if parts.count == 3 {
            let z = Array(parts[2].utf8)
            if z == Array("Z".utf8) || z == Array("UTC".utf8) || z == Array("GMT".utf8) {
                zone = 0
            } else {
                let digits = z.dropFirst().filter { $0 != UInt8(ascii: ":") }
                guard z.count >= 5, z[0] == UInt8(ascii: "+") || z[0] == UInt8(ascii: "-"), digits.count == 4,
                    digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
                else { return nil }
                let d = digits.map { Int($0) - 0x30 }
                zone = (d[0] * 10 + d[1]) * 3600 + (d[2] * 10 + d[3]) * 60
                if z[0] == UInt8(ascii: "-") { zone = -zone }
            }
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: day[0], month: day[1], day: day[2], hour: hour, minute: minute, second: 0)
        guard (1...12).contains(day[1]), (1...31).contains(day[2]), (0...23).contains(hour), (0...59).contains(minute),
            let start = calendar.date(from: components)
        else { return nil }
        return start.addingTimeInterval(seconds - Double(zone))
    }

    /// The first of `candidates` that reads as a time inside the accepted window, else the time
    /// the body was received.
    static func clientTime(_ candidates: [Any?], receivedAt: Date) -> Date {
        for candidate in candidates {
            guard let text = candidate as? String, let time = appleTime(text) else { continue }
            let age = receivedAt.timeIntervalSince(time)
            if age <= ReportLimits.maxAge, -age <= ReportLimits.maxSkew { return time }
            return receivedAt
        }
        return receivedAt
    }

    /// A UUID made from the SHA-256 of `bytes` (RFC 9562 version 8): the same bytes, the same id.
    static func contentID(_ bytes: some Sequence<UInt8>) -> UUID {
        var hasher = SHA256()
        hasher.update(data: Array(bytes))
        var b = Array(hasher.finalize().prefix(16))
        b[6] = (b[6] & 0x0F) | 0x80
        b[8] = (b[8] & 0x3F) | 0x80
        return UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }

    /// A non-negative integer of a JSON number (or a decimal or `0x` text), else nil.
    static func unsigned(_ value: Any?) -> UInt64? {
        switch value {
        case let n as Int: return n >= 0 ? UInt64(n) : nil
        case let n as UInt64: return n
        case let n as Double: return n >= 0 && n < 1.8e19 && n.rounded() == n ? UInt64(n) : nil
        case let n as NSNumber: return n.int64Value >= 0 ? UInt64(n.int64Value) : nil
        case let text as String:
            if text.hasPrefix("0x") || text.hasPrefix("0X") { return UInt64(text.dropFirst(2), radix: 16) }
            return UInt64(text)
        default: return nil
        }
    }

    /// A JSON string, or a number as decimal text.
    static func text(_ value: Any?) -> String? {
        switch value {
        case let text as String: return text
        case let n as Int: return String(n)
        case let n as UInt64: return String(n)
        case let n as Double: return n.rounded() == n && abs(n) < 1e18 ? String(Int64(n)) : String(n)
        default: return nil
        }
    }

    /// The last path component of `path`.
    static func lastComponent(_ path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    static func nonEmpty(_ text: String) -> String? { text.isEmpty ? nil : text }
}
