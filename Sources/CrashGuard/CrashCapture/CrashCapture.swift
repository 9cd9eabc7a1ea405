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
        let error = ccrash_install(recordURL(directory).path, UUID().uuidString.lowercased())
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

    /// Builds the `signal` report with the id the handler wrote (a re-sent crash is a
    /// duplicate): the runtime's message as the reason, else signal, code and address (and
    /// for a trap, the function that trapped: `-O` builds keep no message); the crashing
    /// thread's frames from the first one that is not crash machinery; in `context` the
    /// signal details, registers, the scope at the crash, the other threads' stacks and the
    /// images the frames fall in (base, size, build id, path) for symbolication on a server.
    static func report(for record: CrashRecord, session: Session?, app: AppInfo, device: DeviceInfo, now: Date) -> Report {
        let signalName = ccrash_signal_name(record.signal).map { String(cString: $0) } ?? "signal \(record.signal)"
        let codeName = ccrash_code_name(record.signal, record.code).map { String(cString: $0) } ?? "code \(record.code)"
        let sent = record.code <= 0  // kill, raise, abort: si_addr is not an address
        let addressText = "0x" + String(record.address, radix: 16)

        let crashedImages = session?.images ?? []
        let symbolicator = CachingSymbolicator(Symbolicator(crashed: crashedImages, current: LoadedImage.current()))
        let recorded = record.frames.isEmpty && record.pc != 0 ? [record.pc] : record.frames
        let skipped = machineryPrefix(recorded, symbolicator: symbolicator)
        let frames = Array(recorded.dropFirst(skipped))
        let stack = frames.prefix(ReportLimits.maxFrames).enumerated().map { i, address in
            symbolicator.frame(i, address: address, isReturnAddress: i + skipped > 0)
        }

        let reason: String
        if let message = record.message {
            reason = message
        } else if isTrap(record) {
            let place = frames.first.map { symbolicator.place($0, isReturnAddress: skipped > 0) } ?? "an unknown function"
            reason = "Swift runtime trap (\(trapInstruction(record))) in \(place): \(signalName) (\(codeName))"
        } else if sent {
            reason = "\(signalName) (\(codeName))"
        } else {
            reason = "\(signalName) (\(codeName)) at \(addressText)"
        }

        var context = ContextBuilder()
        context.add("signal", signalName)
        context.add("signal.code", codeName)
        context.add("signal.pc", "0x" + String(record.pc, radix: 16))
        if !sent { context.add("signal.address", addressText) }
        if let message = record.message { context.add("runtime.message", message) }
        if let pid = session?.pid { context.add("process.pid", String(pid)) }
        if !record.registers.isEmpty {
            context.add("registers", record.registers.map { "\($0.name)=0x\(String($0.value, radix: 16))" }.joined(separator: " "))
        }
        if record.truncated { context.add("crash.truncated", "the crash handler faulted; the record ends early") }
        if skipped > 0 { context.add("crash.machineryFrames", String(skipped)) }
        // The images the crashing thread's frames fall in, for symbolication on the server
        // (docs/symbolication.md): before the scope, so a full scope never crowds them out.
        var used: [LoadedImage] = []
        for frame in recorded {
            if let image = crashedImages.first(where: { $0.contains(frame) }), !used.contains(image) { used.append(image) }
        }
        for (i, image) in used.prefix(16).enumerated() {
            context.add("image.\(i)", "0x\(String(image.base, radix: 16)) \(image.size) \(image.buildID.isEmpty ? "-" : image.buildID) \(image.path)")
        }
        // The scope at the crash: user, tags, context, breadcrumbs (at most 32 entries).
        for entry in record.scope.prefix(32) { context.add(entry.key, entry.value) }
        if let crashing = record.threads.first(where: \.crashing) {
            context.add("thread.crashing", "\(crashing.id) \(crashing.name)")
        }
        let others = record.threads.filter { !$0.crashing }
        context.add("threads.count", String(record.threads.count + record.unanswered))
        for (i, thread) in others.prefix(12).enumerated() {
            let names = thread.frames.prefix(24).enumerated().map { j, address in
                symbolicator.place(address, isReturnAddress: j > 0)
            }
            context.add("thread.\(i)", "\(thread.id) \(thread.name): " + names.joined(separator: " < "))
        }

        var timestamp = record.time ?? now
        if timestamp > now { timestamp = now }
        return Report(
            id: record.id ?? UUID(),
            timestamp: timestamp,
            kind: .signal,
            reason: reason,
            stack: stack.isEmpty ? nil : stack,
            fatal: true,
            app: session?.app ?? app,
            device: session?.device ?? device,
            context: context.entries
        )
    }

    /// How many leading frames are crash machinery: the signal's delivery and libc's
    /// `raise`/`abort`/`pthread_kill`, the Swift runtime's and standard library's failure
    /// functions, this SDK's handler. At least one frame is always kept.
    static func machineryPrefix(_ frames: [UInt64], symbolicator: CachingSymbolicator) -> Int {
        var count = 0
        for (i, address) in frames.enumerated() where count < frames.count - 1 {
            let resolved = symbolicator.resolve(address, isReturnAddress: i > 0)
            if let symbol = resolved.symbol {
                guard isMachinery(symbol) else { break }
            } else {
                // libc's internals (`__pthread_kill_implementation`) are in no symbol table
                // we can read on the device: an unnamed libc frame on top is signal delivery.
                guard let image = resolved.image, systemLibraries.contains(where: { image.hasPrefix($0) }) else { break }
            }
            count += 1
        }
        return count
    }

    /// The C libraries whose unnamed frames on top of a crash are signal delivery.
    static let systemLibraries = ["libc.so", "libc-", "libpthread", "libsystem_kernel", "libsystem_pthread", "libsystem_c"]

    /// Names of functions that only report or deliver a crash.
    static func isMachinery(_ symbol: String) -> Bool {
        let exact: Set<String> = [
            "raise", "abort", "gsignal", "pthread_kill", "__pthread_kill_implementation", "__pthread_kill_internal",
            "__GI_raise", "__GI_abort", "__restore_rt", "__kernel_rt_sigreturn", "_sigtramp", "__pthread_kill",
            "__abort_with_payload", "abort_with_payload", "__assert_fail", "__assert_fail_base", "__libc_message",
            "__fortify_fail", "__stack_chk_fail", "__chk_fail",
        ]
        if exact.contains(symbol) { return true }
        let base = symbol.split(separator: "(").first.map(String.init) ?? symbol
        if exact.contains(base) { return true }
        if base.hasPrefix("ccrash_") { return true }
        if base.hasPrefix("swift_"), base.contains("Failure") || base.contains("Error") || base.hasSuffix("abort") {
            return true
        }
        let swiftMachinery = [
            "swift::fatalError", "swift::swift_abort", "swift::fatalErrorv", "swift_reportError",
            "Swift._assertionFailure", "Swift._fatalErrorMessage", "Swift.fatalError", "Swift._preconditionFailure",
            "Swift.preconditionFailure", "Swift.assertionFailure", "Swift._diagnoseUnexpectedNilOptional",
            "Swift._unimplementedInitializer", "Swift._undefined", "_swift_stdlib_reportFatalError",
            "_swift_stdlib_reportUnimplementedInitializer", "swift::warningv",
        ]
        return swiftMachinery.contains { base.hasPrefix($0) }
    }

    /// A trap instruction (Swift's runtime checks in `-O` builds) rather than a fault.
    static func isTrap(_ record: CrashRecord) -> Bool {
        record.signal == ccrash_signal_number("ILL") || record.signal == ccrash_signal_number("TRAP")
    }

    static func trapInstruction(_ record: CrashRecord) -> String {
        let bytes = record.instruction
        if bytes.count >= 2, bytes[0] == 0x0f, bytes[1] == 0x0b { return "ud2" }
        if bytes.count >= 4, bytes[3] == 0xd4, bytes[2] & 0xe0 == 0x20 { return "brk" }
        if bytes.first == 0xcc { return "int3" }
        return "illegal instruction"
    }

    /// This platform's number for `SIGSEGV` and the like (`"SEGV"`).
    static func signalNumber(_ name: String) -> Int32 { ccrash_signal_number(name) }

    /// `true` when the Swift runtime exports its fatal error message buffer here.
    static var hasRuntimeMessageBuffer: Bool { ccrash_has_fatal_message_buffer() != 0 }
}

/// Context entries within the contract's limits: at most 64, keys of 64 bytes, values of
/// 1024 bytes (cut on a character boundary); later entries past the limit are left out.
struct ContextBuilder {
    private(set) var entries: [String: String] = [:]

    mutating func add(_ key: String, _ value: String) {
        let key = Report.clamp(key, ReportLimits.contextKeyBytes)
        guard entries[key] != nil || entries.count < ReportLimits.maxContextEntries else { return }
        entries[key] = Report.clamp(value, ReportLimits.contextValueBytes)
    }
}

/// A ``Symbolicator`` that resolves each address once (the threads of one crash share most
/// of their frames, and reading a symbol table is not free).
final class CachingSymbolicator {
    private let symbolicator: Symbolicator
    private var cache: [UInt64: Symbolicator.Resolved] = [:]

    init(_ symbolicator: Symbolicator) { self.symbolicator = symbolicator }

    func resolve(_ address: UInt64, isReturnAddress: Bool) -> Symbolicator.Resolved {
        let key = isReturnAddress ? address &- 1 : address
        if let hit = cache[key] { return hit }
        let resolved = symbolicator.resolve(address, isReturnAddress: isReturnAddress)
        cache[key] = resolved
        return resolved
    }

    /// The frame line ``Symbolicator/frame(_:address:)`` writes.
    func frame(_ index: Int, address: UInt64, isReturnAddress: Bool) -> String {
        let hex = "0x" + String(address, radix: 16)
        let resolved = resolve(address, isReturnAddress: isReturnAddress)
        guard let image = resolved.image else { return "\(index) ??? \(hex)" }
        return "\(index) \(image) \(hex) \(resolved.symbol ?? image) + \(resolved.offset)"
    }

    /// `symbol` when known, else `image + offset`, else the address.
    func place(_ address: UInt64, isReturnAddress: Bool) -> String {
        let resolved = resolve(address, isReturnAddress: isReturnAddress)
        if let symbol = resolved.symbol { return symbol }
        if let image = resolved.image { return "\(image) + \(resolved.offset)" }
        return "0x" + String(address, radix: 16)
    }
}
