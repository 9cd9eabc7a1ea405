import CrashWire
import Foundation

// The JSON `.ips` crash report: a header line, then the body.

extension AppleCrashReports {
    /// An `.ips` body: the header line (`bug_type` 309 only), then the crash report itself.
    static func ips(_ bytes: [UInt8], receivedAt: Date) throws(IngestError) -> AppleReportBatch {
        var start = 0
        while start < bytes.count, isSpace(bytes[start]) { start += 1 }
        guard let newline = bytes[start...].firstIndex(of: 0x0A) else {
            throw .badRequest("body is neither an .ips crash report nor a MetricKit payload: not JSON")
        }
        guard let header = json(bytes[start..<newline]) as? [String: Any] else {
            throw .badRequest("body is neither an .ips crash report nor a MetricKit payload: the first line is not a JSON object")
        }
        guard let bugType = text(header["bug_type"]) else {
            throw .badRequest(".ips: the header line has no bug_type")
        }
        guard bugType == crashBugType else { throw notACrash(bugType) }
        let rest = bytes[(newline + 1)...]
        guard rest.contains(where: { !isSpace($0) }) else {
            throw .badRequest(".ips: the body line after the header line is missing")
        }
        guard let body = json(rest) as? [String: Any] else {
            throw .badRequest(".ips: the crash report after the header line is not a JSON object (truncated?)")
        }
        guard let threads = body["threads"] as? [Any] else { throw .badRequest(".ips: threads is missing or not an array") }
        guard let images = body["usedImages"] as? [Any] else {
            throw .badRequest(".ips: usedImages is missing or not an array")
        }
        let crash = ipsCrash(header: header, body: body, threads: threads, images: images, bytes: bytes, receivedAt: receivedAt)
        var batch = AppleReportBatch(format: .ips, count: 1, accepted: [], rejected: [])
        switch report(crash, index: 0, receivedAt: receivedAt) {
        case .accepted(let report): batch.accepted.append(report)
        case .rejected(let rejection): batch.rejected.append(rejection)
        }
        return batch
    }

    static func ipsCrash(
        header: [String: Any], body: [String: Any], threads: [Any], images usedImages: [Any], bytes: [UInt8],
        receivedAt: Date
    ) -> Crash {
        // id: the incident id; a report without one is named by its content, so a resend is a duplicate.
        let id =
            (header["incident_id"] as? String).flatMap { UUIDText.parse($0) }
            ?? (body["incident"] as? String).flatMap { UUIDText.parse($0) } ?? contentID(bytes)

        let exception = body["exception"] as? [String: Any] ?? [:]
        let termination = body["termination"] as? [String: Any] ?? [:]
        let thrown = ipsException(body)

        var reasonLines: [String] = []
        if let thrown = thrown.line { reasonLines.append(thrown) }
        reasonLines.append(signalLine(exception))
        reasonLines.append(terminationLine(termination))

        // The faulting thread: `faultingThread`, else the thread marked `triggered`.
        let faulting =
            unsigned(body["faultingThread"]).flatMap { Int(exactly: $0) }.flatMap { $0 < threads.count ? $0 : nil }
            ?? threads.firstIndex { (($0 as? [String: Any])?["triggered"] as? Bool) == true }
        let frameList = faulting.flatMap { ((threads[$0] as? [String: Any])?["frames"] as? [Any]) } ?? []

        var frames: [String] = []
        var images: [Image] = []
        var imageSlots: [Int: Int] = [:]
        for case let frame as [String: Any] in frameList.prefix(ReportLimits.maxFrames) {
            let offset = unsigned(frame["imageOffset"]) ?? 0
            let index = unsigned(frame["imageIndex"]).flatMap { Int(exactly: $0) }
            var image = Image(base: 0, size: 0, uuid: nil, name: "???")
            if let index, index < usedImages.count, let used = usedImages[index] as? [String: Any] {
                let name = (used["name"] as? String).flatMap(nonEmpty) ?? (used["path"] as? String).map(lastComponent)
                image = Image(
                    base: unsigned(used["base"]) ?? 0, size: unsigned(used["size"]) ?? 0, uuid: used["uuid"] as? String,
                    name: name.flatMap(nonEmpty) ?? "???")
                if imageSlots[index] == nil, name != nil {
                    imageSlots[index] = images.count
                    images.append(image)
                }
            }
            if let symbol = (frame["symbol"] as? String).flatMap(nonEmpty) {
                frames.append(
                    Self.frame(
                        frames.count, image: image.name, address: image.base &+ offset, symbol: symbol,
                        symbolOffset: unsigned(frame["symbolLocation"]) ?? 0))
            } else {
                frames.append(Self.frame(frames.count, image: image.name, base: image.base, offset: offset))
            }
        }

        let bundleInfo = body["bundleInfo"] as? [String: Any] ?? [:]
        let osText =
            (header["os_version"] as? String)
            ?? ((body["osVersion"] as? [String: Any]).flatMap { os in
                (os["train"] as? String).map { train in (os["build"] as? String).map { "\(train) (\($0))" } ?? train }
            })
        let os = osText.map(operatingSystem) ?? (name: nil, version: nil)
        let model = (body["modelCode"] as? String).flatMap(nonEmpty)
        let installID = (body["crashReporterKey"] as? String).flatMap(nonEmpty)
        let device =
            [os.name, os.version, model, installID].contains { $0 != nil }
            ? DeviceInfo(os: os.name, osVersion: os.version, model: model, id: installID) : nil

        var context: [(String, String)] = []
        if let incident = (header["incident_id"] as? String) ?? (body["incident"] as? String) {
            context.append(("incident", incident))
        }
        if let codes = text(exception["codes"]) { context.append(("exception.codes", codes)) }
        if let indicator = text(termination["indicator"]) { context.append(("termination.indicator", indicator)) }

        return Crash(
            id: id,
            timestamp: clientTime([body["captureTime"], header["timestamp"]], receivedAt: receivedAt),
            kind: thrown.recorded ? .exception : .signal,
            reasonLines: reasonLines,
            frames: frames,
            appID: (header["bundleID"] as? String).flatMap(nonEmpty) ?? (bundleInfo["CFBundleIdentifier"] as? String),
            appVersion: text(header["app_version"]) ?? text(bundleInfo["CFBundleShortVersionString"]),
            appBuild: text(header["build_version"]) ?? text(bundleInfo["CFBundleVersion"]),
            device: device,
            context: context,
            images: images)
    }

    /// Whether an Objective-C or Swift exception is recorded (`exceptionReason`, a
    /// `lastExceptionBacktrace`, or an `asi` message of an uncaught exception or a Swift fatal
    /// error), and its `"<name>: <message>"` line when the report says it.
    static func ipsException(_ body: [String: Any]) -> (recorded: Bool, line: String?) {
        if let reason = body["exceptionReason"] as? [String: Any] {
            let name = (reason["name"] as? String).flatMap(nonEmpty)
            let message = (reason["composed_message"] as? String).flatMap(nonEmpty)
            switch (name, message) {
            case (let name?, let message?): return (true, "\(name): \(message)")
            case (let name?, nil): return (true, name)
            case (nil, let message?): return (true, message)
            case (nil, nil): break
            }
        }
        var line: String?
        // `asi`: {"<image>": ["message", ...]}. CoreFoundation writes an uncaught exception as
        // `*** Terminating app due to uncaught exception 'NAME', reason: 'MESSAGE'`.
        for (_, value) in (body["asi"] as? [String: Any] ?? [:]).sorted(by: { $0.key < $1.key }) where line == nil {
            for case let message as String in value as? [Any] ?? [] {
                if let thrown = uncaughtException(message) {
                    line = thrown
                    break
                }
                if message.contains("Fatal error") {
                    line = message
                    break
                }
            }
        }
        let backtrace = (body["lastExceptionBacktrace"] as? [Any]).map { !$0.isEmpty } ?? false
        return (line != nil || backtrace, line)
    }

    /// `"NAME: MESSAGE"` of `*** Terminating app due to uncaught exception 'NAME', reason: 'MESSAGE'`.
    static func uncaughtException(_ message: String) -> String? {
        guard let marker = message.range(of: "uncaught exception '") else { return nil }
        let rest = message[marker.upperBound...]
        guard let nameEnd = rest.range(of: "'") else { return nil }
        let name = String(rest[..<nameEnd.lowerBound])
        var reason = rest[nameEnd.upperBound...]
        guard let reasonStart = reason.range(of: "reason: '") else { return name }
        reason = reason[reasonStart.upperBound...]
        if let end = reason.range(of: "'", options: .backwards) { reason = reason[..<end.lowerBound] }
        return reason.isEmpty ? name : "\(name): \(reason)"
    }

    /// `"<exception.type> (<signal>): <subtype or codes>"`, each part when present.
    static func signalLine(_ exception: [String: Any]) -> String {
        var line = (exception["type"] as? String) ?? ""
        if let signal = (exception["signal"] as? String).flatMap(nonEmpty) {
            line = line.isEmpty ? signal : "\(line) (\(signal))"
        }
        if let detail = (exception["subtype"] as? String).flatMap(nonEmpty) ?? text(exception["codes"]).flatMap(nonEmpty) {
            line = line.isEmpty ? detail : "\(line): \(detail)"
        }
        return line
    }

    /// `"Namespace SIGNAL, Code 11 Segmentation fault: 11"`, as Apple's text report writes it.
    static func terminationLine(_ termination: [String: Any]) -> String {
        var parts: [String] = []
        if let namespace = text(termination["namespace"]) { parts.append("Namespace \(namespace)") }
        let code = text(termination["code"])
        let indicator = text(termination["indicator"]).flatMap(nonEmpty)
        switch (code, indicator) {
        case (let code?, let indicator?): parts.append("Code \(code) \(indicator)")
        case (let code?, nil): parts.append("Code \(code)")
        case (nil, let indicator?): parts.append(indicator)
        case (nil, nil): break
        }
        return parts.joined(separator: ", ")
    }
}
