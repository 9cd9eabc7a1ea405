import CCrashCapture
import CrashWire
import Foundation

/// Fatal signal capture. ``install(directory:app:device:)`` writes this run's image map and
/// the app and device beside an empty record file, then installs the C handlers (see
/// `ccrash_capture.h`), which on SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT or SIGFPE write
/// the record and hand the signal on so the process dies as it would have. On the next
/// start ``pendingReport(directory:app:device:)`` turns that record into a `signal` report.
enum CrashCapture {
    /// What the crashed run knew about itself, written at install time.
    struct Session: Codable, Sendable {
        var app: AppInfo
        var device: DeviceInfo
        var pid: Int32
        var images: [LoadedImage]
    }

    static func folder(_ directory: URL) -> URL { directory.appendingPathComponent("crash", isDirectory: true) }
    static func recordURL(_ directory: URL) -> URL { folder(directory).appendingPathComponent("record") }
    static func sessionURL(_ directory: URL) -> URL { folder(directory).appendingPathComponent("session.json") }

    /// Writes the session file and installs the handlers with the record file opened now.
    /// Call only after the previous run's record was taken (the record file is truncated).
    static func install(directory: URL, app: AppInfo, device: DeviceInfo) throws {
        let session = Session(
            app: app, device: device, pid: ProcessInfo.processInfo.processIdentifier, images: LoadedImage.current())
        try writeFileAtomically(try JSONEncoder().encode(session), to: sessionURL(directory))
        let error = ccrash_install(recordURL(directory).path)
        if error != 0 { throw POSIXError(POSIXErrorCode(rawValue: error) ?? .EIO) }
    }

    /// Restores the handlers that were there before ``install(directory:app:device:)``.
    static func uninstall() { ccrash_uninstall() }

    /// Gives the calling thread an alternate signal stack, so a stack overflow on it is
    /// recorded too (the thread that called `start` gets one automatically).
    static func prepareCurrentThread() { _ = ccrash_prepare_thread() }

    /// The previous run's crash as a report, or `nil` when it did not crash.
    static func pendingReport(directory: URL, app: AppInfo, device: DeviceInfo, now: Date = Date()) -> Report? {
        guard let data = try? Data(contentsOf: recordURL(directory)), !data.isEmpty,
            let record = CrashRecord(parsing: data)
        else { return nil }
        let session = (try? Data(contentsOf: sessionURL(directory))).flatMap {
            try? JSONDecoder().decode(Session.self, from: $0)
        }
        return report(for: record, session: session, app: app, device: device, now: now)
    }

    /// Forgets the previous run's record once its report is queued.
    static func clearPending(directory: URL) {
        try? FileManager.default.removeItem(at: recordURL(directory))
    }

    /// Builds the `signal` report: the runtime's message (or signal, code and address) as
    /// the reason, symbolicated frames, and signal details plus the images the frames fall
    /// in (base, size, build id, path) in `context` for symbolication on a server.
    static func report(for record: CrashRecord, session: Session?, app: AppInfo, device: DeviceInfo, now: Date) -> Report {
        let signalName = ccrash_signal_name(record.signal).map { String(cString: $0) } ?? "signal \(record.signal)"
        let codeName = ccrash_code_name(record.signal, record.code).map { String(cString: $0) } ?? "code \(record.code)"
        let sent = record.code <= 0  // kill, raise, abort: si_addr is not an address
        let addressText = "0x" + String(record.address, radix: 16)
        let reason: String
        if let message = record.message {
            reason = message
        } else if sent {
            reason = "\(signalName) (\(codeName))"
        } else {
            reason = "\(signalName) (\(codeName)) at \(addressText)"
        }

        let crashedImages = session?.images ?? []
        let symbolicator = Symbolicator(crashed: crashedImages, current: LoadedImage.current())
        let frames = record.frames.isEmpty && record.pc != 0 ? [record.pc] : record.frames
        let stack = frames.prefix(ReportLimits.maxFrames).enumerated().map { symbolicator.frame($0.offset, address: $0.element) }

        var context: [String: String] = [
            "signal": signalName,
            "signal.code": codeName,
            "signal.pc": "0x" + String(record.pc, radix: 16),
        ]
        if !sent { context["signal.address"] = addressText }
        if let message = record.message { context["runtime.message"] = String(message.prefix(1000)) }
        if let pid = session?.pid { context["process.pid"] = String(pid) }
        var used: [LoadedImage] = []
        for frame in frames {
            if let image = crashedImages.first(where: { $0.contains(frame) }), !used.contains(image) { used.append(image) }
        }
        let room = ReportLimits.maxContextEntries - context.count - 1
        for (i, image) in used.prefix(room).enumerated() {
            context["image.\(i)"] = "0x\(String(image.base, radix: 16)) \(image.size) \(image.buildID.isEmpty ? "-" : image.buildID) \(image.path)"
        }

        var timestamp = record.time ?? now
        if timestamp > now { timestamp = now }
        return Report(
            timestamp: timestamp,
            kind: .signal,
            reason: reason,
            stack: stack.isEmpty ? nil : stack,
            fatal: true,
            app: session?.app ?? app,
            device: session?.device ?? device,
            context: context
        )
    }

    /// This platform's number for `SIGSEGV` and the like (`"SEGV"`).
    static func signalNumber(_ name: String) -> Int32 { ccrash_signal_number(name) }

    /// `true` when the Swift runtime exports its fatal error message buffer here.
    static var hasRuntimeMessageBuffer: Bool { ccrash_has_fatal_message_buffer() != 0 }
}
