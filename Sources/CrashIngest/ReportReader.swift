import CrashGrouping
import CrashWire
import Foundation

/// The second pass over an ingest body that ``JSONBodyScanner`` passed: reads the
/// `reports` array element by element into validated `Report` values or rejections that
/// name the field, with the decisions and messages of the wire format's `Decodable` types
/// (fields in declaration order, the first failure wins), then `Report.validationError`,
/// and signs each valid report with `Grouping`.
///
/// A string longer than its field allows is measured, not copied: its report is rejected
/// with the real length in the message. Arrays and objects past their limits are counted,
/// not kept. So a report costs at most its limits in memory, whatever the body holds.
///
/// The stack's frames are checked and signed where they lie in the body, never copied into
/// a `String` each: a frame string per frame was about half of the server's allocations
/// (docs/performance.md). The report's `stack` stays nil; its text is `stackText`.
struct ReportReader {
    /// One element of `reports`: a valid report, or the message that rejects it.
    typealias Slot = Result<Read, Rejection>

    /// A valid report, scrubbed, where its `stack` array's JSON text is in the body's bytes
    /// (nil when absent or null, or when scrubbing changed a frame: then the frames are in
    /// `report.stack`, else it is nil), its signature, and whether scrubbing changed it.
    struct Read {
        var report: Report
        var stackText: Range<Int>?
        var signature: Signature
        var scrubbed = false
    }

    /// Where a frame of the report being read is: in the body (no escape in it) or, unescaped,
    /// in ``unescaped``.
    private struct FrameRef {
        var start: Int
        var count: Int
        var inUnescaped: Bool
    }

    struct Rejection: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let now: Date
    private let version: GroupingVersion
    private let scrubber: ReportScrubber?
    private var i = 0
    /// The frames of the report being read, and the text of those that hold an escape:
    /// reused from report to report.
    private var frames: [FrameRef] = []
    private var unescaped: [UInt8] = []
    private var framePointers: [UnsafeBufferPointer<UInt8>] = []

    private init(_ bytes: UnsafeBufferPointer<UInt8>, now: Date, version: GroupingVersion, scrubber: ReportScrubber?) {
        self.bytes = bytes
        self.now = now
        self.version = version
        self.scrubber = scrubber
    }

    /// Reads, validates, scrubs (with `scrubber`, when given) and signs (with grouping
    /// `version`) every element of the body's `reports` array. A valid report's `stackText` is
    /// a range of `bytes`.
    static func read(
        _ bytes: UnsafeBufferPointer<UInt8>, now: Date, version: GroupingVersion, scrubber: ReportScrubber? = nil
    ) throws(IngestError) -> [Slot] {
        var reader = ReportReader(bytes, now: now, version: version, scrubber: scrubber)
        return try reader.readBody()
    }

    private mutating func readBody() throws(IngestError) -> [Slot] {
        skipSpace()
        guard i < bytes.count, bytes[i] == 0x7B else { throw JSONBodyScanner.notAnObject }
        var reportsAt: Int?
        forEachMember { reader, key in
            if reader.equals(key, "reports") { reportsAt = reader.i }
            reader.skipValue()
        }
        guard let reportsAt else { throw IngestError.badRequest("body has no \"reports\" array") }
        i = reportsAt
        guard bytes[i] == 0x5B else { throw JSONBodyScanner.notAnArray }
        var slots: [Slot] = []
        forEachElement { reader, _ in
            slots.append(reader.readReport())
        }
        guard !slots.isEmpty else {
            throw IngestError.badRequest("\"reports\" has 0 reports; send 1 to \(WireProtocol.maxReportsPerBatch)")
        }
        return slots
    }

    // MARK: One report

    private enum Field: Int, CaseIterable {
        case id, timestamp, kind, reason, stack, fatal, app, device, fingerprint, context, environment
    }

    private static let fieldNames: [StaticString] = [
        "id", "timestamp", "kind", "reason", "stack", "fatal", "app", "device", "fingerprint", "context", "environment",
    ]

    /// Over-long strings and over-full arrays stand in `Report` as the shortest value of the
    /// same verdict; the real figure is put back into `Report.validationError`'s message.
    private struct Oversize {
        /// Message prefix of the stand-in (`reason: 8193 bytes`) -> its replacement.
        var messages: [(prefix: String, replacement: String)] = []

        mutating func string(_ field: String, limit: Int, real: Int) -> String {
            messages.append(("\(field): \(limit + 1) bytes", "\(field): \(real) bytes"))
            return String(repeating: "x", count: limit + 1)
        }

        mutating func count(_ field: String, kept: Int, real: Int, unit: String) {
            messages.append(("\(field): \(kept) \(unit)", "\(field): \(real) \(unit)"))
        }

        func restore(_ message: String) -> String {
            for (prefix, replacement) in messages where message.hasPrefix(prefix) {
                return replacement + message.dropFirst(prefix.count)
            }
            return message
        }
    }

    private mutating func readReport() -> Slot {
        guard bytes[i] == 0x7B else {
            skipValue()
            return .failure(Rejection("report: must be an object"))
        }
        var at = [Int?](repeating: nil, count: Field.allCases.count)
        var stackEnd = 0
        forEachMember { reader, key in
            let field = reader.field(key)
            if let field { at[field.rawValue] = reader.i }
            reader.skipValue()
            if field == .stack { stackEnd = reader.i }
        }
        let end = i
        defer { i = end }
        var oversize = Oversize()
        let report: Report
        let stack: Stack
        do {
            (report, stack) = try decodeReport(at, &oversize)
        } catch {
            return .failure(error)
        }
        if let problem = report.validationError(now: now, stackError: stack.problem) {
            return .failure(Rejection(oversize.restore(problem)))
        }
        let stackText = at[Field.stack.rawValue].flatMap { bytes[$0] == 0x5B ? $0..<stackEnd : nil }
        // Scrubbed after validation and before signing (data-protection.md, "Order of checks").
        guard let scrubber else {
            return .success(Read(report: report, stackText: stackText, signature: sign(report, hasStack: stack.isPresent)))
        }
        var scrubbedReport = report
        let changed = scrubber.scrub(&scrubbedReport)
        if stack.isPresent, let frames = scrubbedFrames(scrubber) {
            scrubbedReport.stack = frames
            let signature = Grouping.signature(
                kind: report.kind, reason: scrubbedReport.reason, stack: frames, fingerprint: scrubbedReport.fingerprint,
                version: version)
            return .success(Read(report: scrubbedReport, stackText: nil, signature: signature, scrubbed: true))
        }
        return .success(
            Read(
                report: scrubbedReport, stackText: stackText, signature: sign(scrubbedReport, hasStack: stack.isPresent),
                scrubbed: changed))
    }

    /// The frames just read as strings, scrubbed, when scrubbing changed any; nil otherwise
    /// (the usual case: the frames stay where they lie in the body).
    private func scrubbedFrames(_ scrubber: ReportScrubber) -> [String]? {
        var out: [String]?
        unescaped.withUnsafeBufferPointer { unescaped in
            for (index, frame) in frames.enumerated() {
                let base = frame.inUnescaped ? unescaped : bytes
                let text = UnsafeBufferPointer(rebasing: base[frame.start..<frame.start + frame.count])
                let scrubbed = scrubber.scrub(bytes: text)
                if out == nil, scrubbed != nil {
                    out = frames[..<index].map { earlier in
                        let base = earlier.inUnescaped ? unescaped : bytes
                        return String(decoding: base[earlier.start..<earlier.start + earlier.count], as: UTF8.self)
                    }
                }
                if out != nil { out!.append(scrubbed.map { String(decoding: $0, as: UTF8.self) } ?? String(decoding: text, as: UTF8.self)) }
            }
        }
        return out
    }

    /// The signature of `report` with the frames just read (none when `hasStack` is false).
    private mutating func sign(_ report: Report, hasStack: Bool) -> Signature {
        guard hasStack else {
            return Grouping.signature(
                kind: report.kind, reason: report.reason, frames: nil, fingerprint: report.fingerprint, version: version)
        }
        framePointers.removeAll(keepingCapacity: true)
        unescaped.withUnsafeBufferPointer { unescaped in
            for frame in frames {
                let base = frame.inUnescaped ? unescaped : bytes
                framePointers.append(UnsafeBufferPointer(rebasing: base[frame.start..<frame.start + frame.count]))
            }
        }
        // The pointers into `unescaped` stay valid: nothing writes to it until the next report.
        return framePointers.withUnsafeBufferPointer {
            Grouping.signature(
                kind: report.kind, reason: report.reason, frames: $0, fingerprint: report.fingerprint, version: version)
        }
    }

    private func field(_ key: JSONText.Span) -> Field? {
        // Fast path: no field name is longer than 11 bytes or needs escaping.
        for field in Field.allCases where equals(key, Self.fieldNames[field.rawValue]) { return field }
        return nil
    }

    /// A report's `stack` as read: whether it is there (not absent, not null), and what
    /// `Report.validationError` is to say of it.
    private struct Stack {
        var isPresent: Bool
        var problem: String?
    }

    private mutating func decodeReport(_ at: [Int?], _ oversize: inout Oversize) throws(Rejection) -> (Report, Stack) {
        let idText = try requiredString(at[Field.id.rawValue], "id", limit: 64)
        guard case .value(let idString) = idText, let id = UUIDText.parse(idString) else {
            throw Rejection("id: not a UUID")
        }
        let timeText = try requiredString(at[Field.timestamp.rawValue], "timestamp", limit: 64)
        guard case .value(let timeString) = timeText, let timestamp = RFC3339.parse(timeString) else {
            throw Rejection("timestamp: not an RFC 3339 date-time")
        }
        let kindText = try requiredString(at[Field.kind.rawValue], "kind", limit: 64)
        guard case .value(let kindString) = kindText, let kind = ReportKind(rawValue: kindString) else {
            throw Rejection("kind: not one of \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let reason = try string(
            requiredString(at[Field.reason.rawValue], "reason", limit: ReportLimits.reasonBytes.upperBound), "reason",
            ReportLimits.reasonBytes.upperBound, &oversize)
        let stack = try readStack(at[Field.stack.rawValue])
        let fatal = try optionalBool(at[Field.fatal.rawValue], "fatal")
        let app = try decodeApp(at[Field.app.rawValue], &oversize)
        let device = try decodeDevice(at[Field.device.rawValue], &oversize)
        let fingerprint = try stringArray(
            at[Field.fingerprint.rawValue], "fingerprint", limit: ReportLimits.fingerprintPartBytes,
            keep: ReportLimits.fingerprintParts.upperBound + 1, unit: "parts", &oversize)
        let context = try decodeContext(at[Field.context.rawValue], &oversize)
        let environmentLimit = ReportLimits.environmentBytes.upperBound
        let environment = try optionalString(at[Field.environment.rawValue], "environment", limit: environmentLimit).map {
            string($0, "environment", environmentLimit, &oversize)
        }
        let report = Report(
            id: id, timestamp: timestamp, kind: kind, reason: reason, stack: nil, fatal: fatal, app: app,
            device: device, fingerprint: fingerprint, context: context, environment: environment)
        return (report, stack)
    }

    /// The report's `stack`, with the decisions of a `[String]` decoded and validated (type
    /// errors thrown in element order; the count, then each frame's length and NUL, left
    /// for validation), read where it lies: each frame is measured and kept in ``frames``.
    private mutating func readStack(_ at: Int?) throws(Rejection) -> Stack {
        frames.removeAll(keepingCapacity: true)
        unescaped.removeAll(keepingCapacity: true)
        guard let at, bytes[at] != 0x6E else { return Stack(isPresent: false) }
        guard bytes[at] == 0x5B else { throw Rejection("stack: expected an array") }
        var count = 0
        var frameProblem: String?
        var failure: Rejection?
        i = at
        forEachElement { reader, index in
            guard failure == nil else { return reader.skipValue() }
            do throws(Rejection) {
                let (span, length, hasNUL) = try reader.measured(
                    reader.present(reader.i, "stack[\(index)]"), "stack[\(index)]")
                // Frames past the limit, or past a bad one, only need to be strings.
                if frameProblem == nil, index < ReportLimits.maxFrames {
                    frameProblem = Report.frameError(index: index, bytes: length, hasNUL: hasNUL)
                    if frameProblem == nil { reader.keepFrame(span, length) }
                }
                count += 1
            } catch {
                failure = error
            }
            reader.skipValue()
        }
        if let failure { throw failure }
        return Stack(isPresent: true, problem: Report.stackError(frameCount: count) ?? frameProblem)
    }

    private mutating func keepFrame(_ span: JSONText.Span, _ length: Int) {
        guard span.escaped else { return frames.append(FrameRef(start: span.start, count: length, inUnescaped: false)) }
        let start = unescaped.count
        // Measured already: no lone surrogate, `length` bytes.
        _ = JSONText.unescape(bytes, span, appendingTo: &unescaped)
        frames.append(FrameRef(start: start, count: unescaped.count - start, inUnescaped: true))
    }

    private mutating func decodeApp(_ at: Int?, _ oversize: inout Oversize) throws(Rejection) -> AppInfo {
        guard let at else { throw Rejection("app: required") }
        try expectObject(at, "app")
        var fields: [Int?] = [nil, nil, nil]
        i = at
        forEachMember { reader, key in
            if reader.equals(key, "id") { fields[0] = reader.i }
            if reader.equals(key, "version") { fields[1] = reader.i }
            if reader.equals(key, "build") { fields[2] = reader.i }
            reader.skipValue()
        }
        let limit = ReportLimits.appFieldBytes.upperBound
        let id = try string(requiredString(fields[0], "app.id", limit: limit), "app.id", limit, &oversize)
        let version = try string(requiredString(fields[1], "app.version", limit: limit), "app.version", limit, &oversize)
        let build = try optionalString(fields[2], "app.build", limit: limit).map { string($0, "app.build", limit, &oversize) }
        return AppInfo(id: id, version: version, build: build)
    }

    private mutating func decodeDevice(_ at: Int?, _ oversize: inout Oversize) throws(Rejection) -> DeviceInfo? {
        guard let at, bytes[at] != 0x6E else { return nil }
        try expectObject(at, "device")
        let names: [StaticString] = ["os", "osVersion", "model", "id"]
        var fields: [Int?] = [nil, nil, nil, nil]
        i = at
        forEachMember { reader, key in
            for (n, name) in names.enumerated() where reader.equals(key, name) { fields[n] = reader.i }
            reader.skipValue()
        }
        let limit = ReportLimits.deviceFieldBytes
        var values: [String?] = []
        for (n, name) in ["device.os", "device.osVersion", "device.model", "device.id"].enumerated() {
            values.append(try optionalString(fields[n], name, limit: limit).map { string($0, name, limit, &oversize) })
        }
        return DeviceInfo(os: values[0], osVersion: values[1], model: values[2], id: values[3])
    }

    private mutating func decodeContext(_ at: Int?, _ oversize: inout Oversize) throws(Rejection) -> [String: String]? {
        guard let at, bytes[at] != 0x6E else { return nil }
        try expectObject(at, "context")
        let keep = ReportLimits.maxContextEntries + 1
        var context: [String: String] = [:]
        var entries = 0
        var failure: Rejection?
        i = at
        forEachMember { reader, keySpan in
            guard failure == nil else { return reader.skipValue() }
            let key = JSONText.decode(reader.bytes, keySpan) ?? "\u{FFFD}"
            do throws(Rejection) {
                let value = try reader.requiredString(reader.i, "context.\(key)", limit: ReportLimits.contextValueBytes)
                entries += 1
                if context.count < keep || context[key] != nil {
                    context[key] = reader.string(value, "context[\(key)]", ReportLimits.contextValueBytes, &oversize)
                }
            } catch {
                failure = error
            }
            reader.skipValue()
        }
        if let failure { throw failure }
        if entries > context.count, context.count == keep {
            oversize.count("context", kept: keep, real: entries, unit: "entries")
        }
        return context
    }

    /// `[String]?`: absent or null is nil; elements past `keep` are checked, not kept.
    private mutating func stringArray(
        _ at: Int?, _ name: String, limit: Int, keep: Int, unit: String, _ oversize: inout Oversize
    ) throws(Rejection) -> [String]? {
        guard let at, bytes[at] != 0x6E else { return nil }
        guard bytes[at] == 0x5B else { throw Rejection("\(name): expected an array") }
        var values: [String] = []
        var count = 0
        var failure: Rejection?
        i = at
        forEachElement { reader, index in
            guard failure == nil else { return reader.skipValue() }
            do throws(Rejection) {
                if values.count < keep {
                    let text = try reader.requiredString(reader.i, "\(name)[\(index)]", limit: limit)
                    values.append(reader.string(text, "\(name)[\(index)]", limit, &oversize))
                } else {
                    // Past what is kept: checked as a kept element is, never copied.
                    _ = try reader.measured(reader.present(reader.i, "\(name)[\(index)]"), "\(name)[\(index)]")
                }
                count += 1
            } catch {
                failure = error
            }
            reader.skipValue()
        }
        if let failure { throw failure }
        if count > values.count { oversize.count(name, kept: values.count, real: count, unit: unit) }
        return values
    }

    // MARK: Values

    private enum Text {
        case value(String)
        case tooLong(Int)
    }

    // Field names are autoclosures: an array's element name (`stack[12]`) is built only for
    // its error, not for each of the millions of elements a hostile body may hold.
    private func requiredString(_ at: Int?, _ name: @autoclosure () -> String, limit: Int) throws(Rejection) -> Text {
        try text(present(at, name()), name(), limit: limit)
    }

    /// `at`, when the value is there and not null.
    private func present(_ at: Int?, _ name: @autoclosure () -> String) throws(Rejection) -> Int {
        guard let at else { throw Rejection("\(name()): required") }
        if bytes[at] == 0x6E { throw Rejection("\(name()): must not be null") }
        return at
    }

    private func optionalString(_ at: Int?, _ name: @autoclosure () -> String, limit: Int) throws(Rejection) -> Text? {
        guard let at, bytes[at] != 0x6E else { return nil }
        return try text(at, name(), limit: limit)
    }

    private func text(_ at: Int, _ name: @autoclosure () -> String, limit: Int) throws(Rejection) -> Text {
        let (span, count, _) = try measured(at, name())
        if count > limit { return .tooLong(count) }
        guard let value = JSONText.decode(bytes, span) else { throw Rejection("\(name()): invalid value") }
        return .value(value)
    }

    /// The string at `at`, checked as ``text(_:_:limit:)`` checks it (a string, no lone
    /// surrogate), its length in UTF-8 bytes and whether it holds U+0000; nothing is copied.
    private func measured(
        _ at: Int, _ name: @autoclosure () -> String
    ) throws(Rejection) -> (span: JSONText.Span, count: Int, hasNUL: Bool) {
        guard bytes[at] == 0x22 else { throw Rejection("\(name()): expected a string") }
        var end = at
        let span = Self.scanString(bytes, at: &end)
        guard case .text(let count, let hasNUL) = JSONText.measure(bytes, span) else {
            throw Rejection("\(name()): invalid value")
        }
        return (span, count, hasNUL)
    }

    private func string(_ text: Text, _ name: @autoclosure () -> String, _ limit: Int, _ oversize: inout Oversize) -> String {
        switch text {
        case .value(let value): return value
        case .tooLong(let count): return oversize.string(name(), limit: limit, real: count)
        }
    }

    private func optionalBool(_ at: Int?, _ name: String) throws(Rejection) -> Bool? {
        guard let at else { return nil }
        switch bytes[at] {
        case 0x6E: return nil
        case 0x74: return true
        case 0x66: return false
        default: throw Rejection("\(name): expected a boolean")
        }
    }

    private func expectObject(_ at: Int, _ name: String) throws(Rejection) {
        if bytes[at] == 0x6E { throw Rejection("\(name): must not be null") }
        guard bytes[at] == 0x7B else { throw Rejection("\(name): expected an object") }
    }

    // MARK: Walking valid JSON

    private mutating func skipSpace() {
        while i < bytes.count, JSONBodyScanner.isSpace(bytes[i]) { i += 1 }
    }

    private func equals(_ span: JSONText.Span, _ text: StaticString) -> Bool {
        if !span.escaped {
            guard span.rawCount == text.utf8CodeUnitCount else { return false }
            return text.withUTF8Buffer { $0.elementsEqual(UnsafeBufferPointer(rebasing: bytes[span.start..<span.end])) }
        }
        guard let decoded = JSONText.decode(bytes, span) else { return false }
        return text.withUTF8Buffer { $0.elementsEqual(decoded.utf8) }
    }

    /// At an opening quote: moves past the closing one and returns the contents' span.
    private mutating func scanString() -> JSONText.Span {
        Self.scanString(bytes, at: &i)
    }

    /// ``scanString()`` at `i` of `bytes`.
    private static func scanString(_ bytes: UnsafeBufferPointer<UInt8>, at i: inout Int) -> JSONText.Span {
        i += 1
        let start = i
        var escaped = false
        while true {
            // Valid JSON: the only bytes that stop the run are `"` and `\`.
            i = JSONText.endOfPlainText(bytes, from: i, stoppingAtNonASCII: false)
            if bytes[i] == 0x22 { break }
            escaped = true
            i += 2
        }
        let span = JSONText.Span(start: start, end: i, escaped: escaped)
        i += 1
        return span
    }

    /// At a value: moves past it (containers without recursion).
    private mutating func skipValue() {
        var depth = 0
        repeat {
            let b = bytes[i]
            switch b {
            case 0x22:
                _ = scanString()
                if depth == 0 { return }
                continue
            case 0x7B, 0x5B:
                depth += 1
            case 0x7D, 0x5D:
                depth -= 1
            default:
                break
            }
            i += 1
            if depth == 0 {
                // A scalar that is not a string runs to the next delimiter.
                if b != 0x7D, b != 0x5D {
                    while i < bytes.count {
                        let c = bytes[i]
                        if c == 0x2C || c == 0x7D || c == 0x5D || JSONBodyScanner.isSpace(c) { break }
                        i += 1
                    }
                }
                return
            }
        } while true
    }

    /// At `{`: calls `body` with each key's span and `i` at its value; `body` must move
    /// `i` past the value. Leaves `i` past the `}`.
    private mutating func forEachMember(_ body: (inout ReportReader, JSONText.Span) -> Void) {
        i += 1
        skipSpace()
        if bytes[i] == 0x7D {
            i += 1
            return
        }
        while true {
            let key = scanString()
            skipSpace()
            i += 1  // :
            skipSpace()
            body(&self, key)
            skipSpace()
            let b = bytes[i]
            i += 1
            if b == 0x7D { return }
            skipSpace()  // after ,
        }
    }

    /// At `[`: calls `body` with each element's index and `i` at it; `body` must move `i`
    /// past it. Leaves `i` past the `]`.
    private mutating func forEachElement(_ body: (inout ReportReader, Int) -> Void) {
        i += 1
        skipSpace()
        if bytes[i] == 0x5D {
            i += 1
            return
        }
        var index = 0
        while true {
            body(&self, index)
            index += 1
            skipSpace()
            let b = bytes[i]
            i += 1
            if b == 0x5D { return }
            skipSpace()
        }
    }

}
