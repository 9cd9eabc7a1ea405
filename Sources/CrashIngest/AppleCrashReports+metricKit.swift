import CrashWire
import Foundation

// MetricKit's `MXDiagnosticPayload.jsonRepresentation()`: one report per crash diagnostic.

extension AppleCrashReports {
    /// A MetricKit payload: each of `crashDiagnostics` becomes a report; hangs, CPU and disk
    /// write exceptions and launch diagnostics are accepted and ignored.
    static func metricKit(_ payload: [String: Any], receivedAt: Date) throws(IngestError) -> AppleReportBatch {
        var diagnostics: [Any] = []
        if let value = payload["crashDiagnostics"], !(value is NSNull) {
            guard let list = value as? [Any] else { throw .badRequest("MetricKit: crashDiagnostics is not an array") }
            diagnostics = list
        }
        var batch = AppleReportBatch(format: .metricKit, count: diagnostics.count, accepted: [], rejected: [])
        for (index, value) in diagnostics.enumerated() {
            guard let diagnostic = value as? [String: Any] else {
                batch.rejected.append(.init(index: index, error: "crashDiagnostics[\(index)]: not a JSON object"))
                continue
            }
            let crash = metricKitCrash(diagnostic, payload: payload, receivedAt: receivedAt)
            switch report(crash, index: index, receivedAt: receivedAt) {
            case .accepted(let report): batch.accepted.append(report)
            case .rejected(let rejection): batch.rejected.append(rejection)
            }
        }
        return batch
    }

    static func metricKitCrash(_ diagnostic: [String: Any], payload: [String: Any], receivedAt: Date) -> Crash {
        // `jsonRepresentation()` puts the crash's fields in `diagnosticMetaData`; some writers put
        // them beside it.
        let meta = diagnostic["diagnosticMetaData"] as? [String: Any] ?? [:]
        func field(_ key: String) -> Any? { meta[key] ?? diagnostic[key] }

        // The id: the diagnostic's canonical JSON (sorted keys), so a resend is a duplicate.
        let canonical =
            (try? JSONSerialization.data(withJSONObject: diagnostic, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        let id = contentID(canonical)

        let thrown = (field("exceptionReason") ?? field("objectiveCexceptionReason")) as? [String: Any]
        var reasonLines: [String] = []
        if let thrown {
            let name = (thrown["exceptionName"] as? String).flatMap(nonEmpty)
            let message = (thrown["composedMessage"] as? String).flatMap(nonEmpty)
            switch (name, message) {
            case (let name?, let message?): reasonLines.append("\(name): \(message)")
            case (let name?, nil): reasonLines.append(name)
            case (nil, let message?): reasonLines.append(message)
            case (nil, nil): break
            }
        }
        if reasonLines.isEmpty {
            let type = unsigned(field("exceptionType")).map(Self.machExceptionName)
            let signal = unsigned(field("signal")).map(Self.signalName)
            switch (type, signal) {
            case (let type?, let signal?): reasonLines.append("\(type) (\(signal))")
            case (let type?, nil): reasonLines.append(type)
            case (nil, let signal?): reasonLines.append(signal)
            case (nil, nil): break
            }
        }
        let termination = text(field("terminationReason"))
        if let termination { reasonLines.append(termination) }

        var frames: [String] = []
        var images: [Image] = []
        var imageSlots: [String: Int] = [:]
        var frame = attributedRootFrame(diagnostic["callStackTree"])
        while let current = frame, frames.count < ReportLimits.maxFrames {
            let name = (current["binaryName"] as? String).flatMap(nonEmpty) ?? "???"
            let offset = unsigned(current["offsetIntoBinaryTextSegment"]) ?? 0
            let address = unsigned(current["address"]) ?? offset
            let base = address >= offset ? address - offset : 0
            frames.append(Self.frame(frames.count, image: name, base: base, offset: offset))
            let uuid = current["binaryUUID"] as? String
            let key = "\(uuid ?? "") \(name) \(base)"
            if imageSlots[key] == nil, name != "???" {
                imageSlots[key] = images.count
                images.append(Image(base: base, size: 0, uuid: uuid, name: name))
            }
            frame = (current["subFrames"] as? [Any])?.first as? [String: Any]
        }

        let os = (text(field("osVersion"))).map(operatingSystem) ?? (name: nil, version: nil)
        let model = text(field("deviceType")).flatMap(nonEmpty)
        let device =
            [os.name, os.version, model].contains { $0 != nil }
            ? DeviceInfo(os: os.name, osVersion: os.version, model: model) : nil

        var context: [(String, String)] = []
        if let code = text(field("exceptionCode")) { context.append(("exception.codes", code)) }
        if let termination { context.append(("termination.indicator", termination)) }

        return Crash(
            id: id,
            timestamp: clientTime([payload["timeStampEnd"]], receivedAt: receivedAt),
            kind: thrown != nil ? .exception : .signal,
            reasonLines: reasonLines,
            frames: frames,
            appID: text(field("bundleIdentifier")),
            appVersion: text(field("appVersion")),
            appBuild: text(field("appBuildVersion")),
            device: device,
            context: context,
            images: images)
    }

    /// The first root frame of the `threadAttributed` call stack (else of the first one).
    static func attributedRootFrame(_ tree: Any?) -> [String: Any]? {
        guard let stacks = (tree as? [String: Any])?["callStacks"] as? [Any] else { return nil }
        let objects = stacks.compactMap { $0 as? [String: Any] }
        let attributed = objects.first { ($0["threadAttributed"] as? Bool) == true } ?? objects.first
        return (attributed?["callStackRootFrames"] as? [Any])?.first as? [String: Any]
    }

    /// The Mach exception type's name (`<mach/exception_types.h>`): 1 is `EXC_BAD_ACCESS`.
    static func machExceptionName(_ type: UInt64) -> String {
        let names = [
            1: "EXC_BAD_ACCESS", 2: "EXC_BAD_INSTRUCTION", 3: "EXC_ARITHMETIC", 4: "EXC_EMULATION", 5: "EXC_SOFTWARE",
            6: "EXC_BREAKPOINT", 7: "EXC_SYSCALL", 8: "EXC_MACH_SYSCALL", 9: "EXC_RPC_ALERT", 10: "EXC_CRASH",
            11: "EXC_RESOURCE", 12: "EXC_GUARD", 13: "EXC_CORPSE_NOTIFY",
        ]
        return Int(exactly: type).flatMap { names[$0] } ?? "EXC_\(type)"
    }

    /// The Darwin signal's name (`<sys/signal.h>`): 11 is `SIGSEGV`.
    static func signalName(_ signal: UInt64) -> String {
        let names = [
            1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGEMT", 8: "SIGFPE",
            9: "SIGKILL", 10: "SIGBUS", 11: "SIGSEGV", 12: "SIGSYS", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
        ]
        return Int(exactly: signal).flatMap { names[$0] } ?? "SIG\(signal)"
    }
}
