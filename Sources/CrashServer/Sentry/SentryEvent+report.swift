import CrashIngest
import CrashWire
import Foundation

/// How a Sentry event becomes a report (the contract, "Ingest from Sentry SDKs"), as a
/// pure function so every rule is tested without a server.
///
/// Values longer than the report's limits are cut at a UTF-8 character boundary instead
/// of losing the event (a stack keeps its innermost 256 frames, a fingerprint its first 8
/// parts, the context its first 64 entries in key order after `environment`), and NUL
/// characters, which PostgreSQL text cannot hold, become U+FFFD. See docs/sentry.md.
extension SentryEvent {
    /// The reason of an event without exception or message (Sentry's own title for it).
    static let unlabeledReason = "<unlabeled event>"

    /// The report for this event, received at `receivedAt`; `id` is used when the event
    /// has no `event_id` of its own (the envelope's, else a fresh one).
    func report(receivedAt: Date, id fallbackID: UUID? = nil) -> Report {
        let last = exceptions.last
        var reason: String
        if let last {
            switch (Self.nonEmpty(last.type), Self.nonEmpty(last.value)) {
            case (let type?, let value?): reason = "\(type): \(value)"
            case (let type?, nil): reason = type
            case (nil, let value?): reason = value
            case (nil, nil): reason = Self.unlabeledReason
            }
        } else {
            reason =
                Self.nonEmpty(logentry?.formatted) ?? Self.nonEmpty(logentry?.message) ?? Self.nonEmpty(message?.formatted)
                ?? Self.nonEmpty(message?.message) ?? Self.unlabeledReason
        }
        reason = ReportLimits.clip(reason, ReportLimits.reasonBytes.upperBound)

        var stack: [String]?
        var stackImages: [DebugImage] = []
        if let last, !last.frames.isEmpty {
            let frames = last.frames.contains { $0.inApp == true } ? last.frames.filter { $0.inApp == true } : last.frames
            var lines: [String] = []
            for frame in frames.reversed().prefix(ReportLimits.maxFrames) {
                if let (line, image) = appleFrame(frame, index: lines.count) {
                    if !stackImages.contains(where: { $0.imageAddress == image.imageAddress && $0.debugID == image.debugID }) {
                        stackImages.append(image)
                    }
                    lines.append(ReportLimits.clip(line, ReportLimits.frameBytes))
                } else {
                    lines.append(
                        ReportLimits.clip("\(frame.function.flatMap(Self.nonEmpty) ?? "?") (\(Self.place(of: frame)))", ReportLimits.frameBytes))
                }
            }
            stack = lines
        }

        var appID = Self.nonEmpty(appIdentifier)
        var version: String?
        var build: String?
        if let release = Self.nonEmpty(release) {
            if let at = release.firstIndex(of: "@") {
                appID = appID ?? Self.nonEmpty(String(release[..<at]))
                var rest = Substring(release[release.index(after: at)...])
                if let plus = rest.firstIndex(of: "+") {
                    build = Self.nonEmpty(String(rest[rest.index(after: plus)...]))
                    rest = rest[..<plus]
                }
                version = Self.nonEmpty(String(rest))
                if version == nil { build = nil }
            }
            version = version ?? release
        }
        let appLimit = ReportLimits.appFieldBytes.upperBound
        let app = AppInfo(
            id: ReportLimits.clip(appID ?? "unknown", appLimit), version: ReportLimits.clip(version ?? "unknown", appLimit),
            build: build.map { ReportLimits.clip($0, appLimit) })

        var device: DeviceInfo?
        let deviceFields = [osName, osVersion, deviceModel, Self.nonEmpty(userID) ?? deviceID]
        if deviceFields.contains(where: { $0 != nil }) {
            let limit = ReportLimits.deviceFieldBytes
            let clipped = deviceFields.map { $0.map { ReportLimits.clip($0, limit) } }
            device = DeviceInfo(os: clipped[0], osVersion: clipped[1], model: clipped[2], id: clipped[3])
        }

        var printFingerprint: [String]?
        if let fingerprint, !fingerprint.isEmpty, fingerprint != ["{{ default }}"] {
            printFingerprint = fingerprint.prefix(ReportLimits.fingerprintParts.upperBound).map {
                ReportLimits.clip($0, ReportLimits.fingerprintPartBytes)
            }
        }

        var context: [String: String] = [:]
        var entries = tags.sorted { $0.key < $1.key }
        if let environment { entries.insert(("environment", environment), at: 0) }
        // The images of the stack's address frames first, so tags never crowd them out.
        for (n, image) in stackImages.enumerated().reversed() {
            entries.insert(
                ("image.\(n)", "0x\(String(image.imageAddress, radix: 16)) \(image.imageSize) \(image.debugID) \(image.name)"), at: 0)
        }
        for (key, value) in entries where context.count < ReportLimits.maxContextEntries {
            let key = ReportLimits.clip(key, ReportLimits.contextKeyBytes)
            if context[key] == nil { context[key] = ReportLimits.clip(value, ReportLimits.contextValueBytes) }
        }

        return Report(
            id: eventID ?? fallbackID ?? UUID(),
            timestamp: Self.clientTime(timestamp, receivedAt: receivedAt),
            kind: exceptions.isEmpty ? .custom : .exception,
            reason: reason,
            stack: stack,
            fatal: last?.handled == false,
            app: app,
            device: device,
            fingerprint: printFingerprint,
            context: context.isEmpty ? nil : context,
            environment: environment.flatMap { Report.environmentError($0) == nil ? $0 : nil } ?? ReportLimits.defaultEnvironment)
    }

    /// A frame without a function (or `<redacted>`, what the Cocoa SDK writes for a symbol it
    /// may not read) whose `instruction_addr` lies in a Mach-O image of `debug_meta`: Apple's
    /// unsymbolicated line `"<i> <image> 0x<address> 0x<image_addr> + <offset>"` (offset in
    /// decimal), which grouping reads as image + offset and symbolication by the image's UUID.
    func appleFrame(_ frame: Frame, index: Int) -> (line: String, image: DebugImage)? {
        guard let address = frame.instructionAddress, !images.isEmpty else { return nil }
        if let function = frame.function, !function.isEmpty, function != "<redacted>" { return nil }
        guard let image = images.first(where: { $0.contains(address) }) else { return nil }
        let line =
            "\(index) \(image.name) 0x\(String(address, radix: 16)) 0x\(String(image.imageAddress, radix: 16)) + \(address - image.imageAddress)"
        return (line, image)
    }

    /// A frame's place: `module`, else `filename`, else the last path component of
    /// `package` (an install path differs per device), else `?`.
    static func place(of frame: Frame) -> String {
        if let module = nonEmpty(frame.module) { return module }
        if let filename = nonEmpty(frame.filename) { return filename }
        if let package = nonEmpty(frame.package) {
            let last = package.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init)
            return nonEmpty(last) ?? package
        }
        return "?"
    }

    /// The event's time when it is inside the accepted window, else the time it was received.
    static func clientTime(_ timestamp: Timestamp?, receivedAt: Date) -> Date {
        let parsed: Date?
        switch timestamp {
        case .seconds(let seconds)? where seconds.isFinite:
            parsed = Date(timeIntervalSince1970: seconds)
        case .text(let text)?:
            // Sentry accepts a zone-less time as UTC.
            let hasZone =
                text.hasSuffix("Z") || text.hasSuffix("z") || text.dropFirst(19).contains("+")
                || text.dropFirst(19).contains("-")
            parsed = RFC3339.parse(hasZone ? text : text + "Z") ?? Double(text).map(Date.init(timeIntervalSince1970:))
        default:
            parsed = nil
        }
        guard let parsed else { return receivedAt }
        let age = receivedAt.timeIntervalSince(parsed)
        guard age <= ReportLimits.maxAge, -age <= ReportLimits.maxSkew else { return receivedAt }
        return parsed
    }

    private static func nonEmpty(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return text
    }
}
