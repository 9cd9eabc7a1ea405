import CrashWire
import Foundation

// MetricKit's `MXDiagnosticPayload.jsonRepresentation()`: one report per crash diagnostic.

extension AppleCrashReports {
    /// A MetricKit payload: each of `crashDiagnostics` becomes a report; hangs, CPU and disk
    /// write exceptions and launch diagnostics are accepted and ignored.
    /// `payload` is the tree's root as Foundation values, its call stacks left out.
    static func metricKit(_ payload: [String: Any], tree: JSONTree, receivedAt: Date) throws(IngestError) -> AppleReportBatch {
        var diagnostics: [Int] = []
        if let value = tree.member(tree.root, "crashDiagnostics") {
            if case .null = tree[value] {
            } else {
                guard let list = tree.elements(value) else { throw .badRequest("MetricKit: crashDiagnostics is not an array") }
                diagnostics = list
            }
        }
        var batch = AppleReportBatch(format: .metricKit, count: diagnostics.count, accepted: [], rejected: [])
        for (index, node) in diagnostics.enumerated() {
            guard let diagnostic = tree.foundationValue(node, omitting: ["callStackTree"]) as? [String: Any] else {
                batch.rejected.append(.init(index: index, error: "crashDiagnostics[\(index)]: not a JSON object"))
                continue
            }
            let crash = metricKitCrash(diagnostic, node: node, tree: tree, payload: payload, receivedAt: receivedAt)
            switch report(crash, index: index, receivedAt: receivedAt) {
            case .accepted(let report): batch.accepted.append(report)
            case .rejected(let rejection): batch.rejected.append(rejection)
            }
        }
        return batch
    }

    /// `diagnostic` is the tree's `node` as Foundation values, without its call stacks.
    static func metricKitCrash(_ diagnostic: [String: Any], node: Int, tree: JSONTree, payload: [String: Any], receivedAt: Date) -> Crash {
        // `jsonRepresentation()` puts the crash's fields in `diagnosticMetaData`; some writers put
        // them beside it.
        let meta = diagnostic["diagnosticMetaData"] as? [String: Any] ?? [:]
        func field(_ key: String) -> Any? { meta[key] ?? diagnostic[key] }

        // The id: the diagnostic's canonical JSON (``JSONTree/canonical(_:)``), so a resend is a duplicate.
        let id = contentID(tree.canonical(node))

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
        var frame = attributedRootFrame(tree.member(node, "callStackTree"), in: tree)
        while let current = frame, frames.count < ReportLimits.maxFrames {
            // The frame's own members (its subFrames left in the tree).
            let fields = tree.foundationValue(current, omitting: ["subFrames"], maxDepth: 2) as? [String: Any] ?? [:]
            let name = (fields["binaryName"] as? String).flatMap(nonEmpty) ?? "???"
            let offset = unsigned(fields["offsetIntoBinaryTextSegment"]) ?? 0
            let address = unsigned(fields["address"]) ?? offset
            let base = address >= offset ? address - offset : 0
            frames.append(Self.frame(frames.count, image: name, base: base, offset: offset))
            let uuid = fields["binaryUUID"] as? String
            let key = "\(uuid ?? "") \(name) \(base)"
            if imageSlots[key] == nil, name != "???" {
                imageSlots[key] = images.count
                images.append(Image(base: base, size: 0, uuid: uuid, name: name))
            }
            frame = tree.member(current, "subFrames").flatMap { tree.elements($0)?.first }.flatMap { next in
                if case .object = tree[next] { next } else { nil }
            }
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

    /// The first root frame of the `threadAttributed` call stack (else of the first one), in
    /// `tree` from the `callStackTree` node.
    static func attributedRootFrame(_ callStackTree: Int?, in tree: JSONTree) -> Int? {
        guard let callStackTree, let list = tree.member(callStackTree, "callStacks"), let stacks = tree.elements(list) else {
            return nil
        }
        let objects = stacks.filter { if case .object = tree[$0] { true } else { false } }
        let attributed =
            objects.first { stack in
                guard let flag = tree.member(stack, "threadAttributed"), case .bool(true) = tree[flag] else { return false }
                return true
            } ?? objects.first
        guard let roots = attributed.flatMap({ tree.member($0, "callStackRootFrames") }).flatMap({ tree.elements($0) }),
            let first = roots.first, case .object = tree[first]
        else { return nil }
        return first
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
