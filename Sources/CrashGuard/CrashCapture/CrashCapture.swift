import CCrashCapture
import CrashGuardObjC
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
        installed.withLock { $0 = (directory, session) }
        let error = ccrash_install(recordURL(directory).path, UUID().uuidString.lowercased())
        if error != 0 { throw POSIXError(POSIXErrorCode(rawValue: error) ?? .EIO) }
        // Uncaught exceptions: noted for the record the abort that follows them writes.
        ccrash_install_terminate_handler()
        _ = crashguard_objc_install_exception_handler(objcExceptionSink)
    }

    /// Where the Objective-C uncaught-exception handler hands an exception: the crash
    /// handler's preallocated memory (`ccrash_note_exception`).
    static let objcExceptionSink: crashguard_objc_exception_sink = { kind, name, reason, frames, count in
        ccrash_note_exception(kind, name, reason, frames, count)
    }

    /// Restores the handlers that were there before ``install(directory:app:device:)``.
    static func uninstall() {
        installed.withLock { $0 = nil }
        ccrash_uninstall()
    }

    /// The directory and session file contents of the installed handlers.
    private static let installed = LockedBox<(directory: URL, session: Session)?>(nil)

    /// Rewrites the session file's image map after images were loaded or unloaded (called
    /// by ``ImageCache`` when it notices), so a later crash's frames in them are named.
    static func imagesChanged(_ images: [LoadedImage]) {
        installed.withLock { state in
            guard var current = state, current.session.images != images else { return }
            current.session.images = images
            if let data = try? JSONEncoder().encode(current.session) {
                try? writeFileAtomically(data, to: sessionURL(current.directory))
            }
            state = current
        }
    }

    /// Gives the calling thread an alternate signal stack, so a stack overflow on it is
    /// recorded too (the thread that called `start` gets one automatically).
    static func prepareCurrentThread() { _ = ccrash_prepare_thread() }

    /// The previous run's crash as a report, or `nil` when it did not crash.
    static func pendingReport(directory: URL, app: AppInfo, device: DeviceInfo, now: Date = Date()) -> Report? {
        report(record: recordURL(directory), session: sessionURL(directory), app: app, device: device, now: now)
    }

    /// The report of the record at `record` (with the crashed run's session file beside it).
    static func report(
        record recordURL: URL, session sessionURL: URL, app: AppInfo, device: DeviceInfo, now: Date
    )
        -> Report?
    {
        guard let data = try? Data(contentsOf: recordURL), !data.isEmpty,
            let record = CrashRecord(parsing: data)
        else { return nil }
        if crashWhileProcessing { abort() }
        let session = (try? Data(contentsOf: sessionURL)).flatMap {
            try? JSONDecoder().decode(Session.self, from: $0)
        }
        return report(for: record, session: session, app: app, device: device, now: now)
    }

    // MARK: - The previous run's record, off the launch thread

    /// Records moved aside at start and not yet queued: `crash/previous/<name>/` holds one
    /// run's `record`, its `session.json` and `attempts` (how often processing began).
    static func previousFolder(_ directory: URL) -> URL { folder(directory).appendingPathComponent("previous") }
    /// Records whose processing crashed the process twice: kept for inspection, never retried.
    static func setAsideFolder(_ directory: URL) -> URL { folder(directory).appendingPathComponent("set-aside") }
    /// How many times a record's processing may begin; a record whose processing began this
    /// often and never finished crashed it each time, and is set aside.
    static let maxAttempts = 2

    /// Moves the previous run's record (and its session file) out of the way, so `install`
    /// can open a fresh record at once; sets aside records that crashed their own processing
    /// ``maxAttempts`` times. Cheap (renames only). Returns the records to process, oldest
    /// first, and whether the previous run left a crash record.
    static func takePrevious(directory: URL, log: (String) -> Void) -> (pending: [URL], crashed: Bool) {
        let manager = FileManager.default
        let previous = previousFolder(directory)
        var crashed = false
        if let size = (try? manager.attributesOfItem(atPath: recordURL(directory).path))?[.size] as? Int, size > 0 {
            crashed = true
            let name = String(format: "%013.0f", Date().timeIntervalSince1970 * 1000) + "-" + UUID().uuidString.lowercased()
            let target = previous.appendingPathComponent(name, isDirectory: true)
            do {
                try manager.createDirectory(at: target, withIntermediateDirectories: true)
                try manager.moveItem(at: recordURL(directory), to: target.appendingPathComponent("record"))
                try? manager.moveItem(at: sessionURL(directory), to: target.appendingPathComponent("session.json"))
            } catch {
                log("crash record could not be moved aside: \(error)")
            }
        }
        let names = ((try? manager.contentsOfDirectory(atPath: previous.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
        var pending: [URL] = []
        for name in names {
            let folder = previous.appendingPathComponent(name, isDirectory: true)
            if attempts(folder) >= maxAttempts {
                let aside = setAsideFolder(directory)
                try? manager.createDirectory(at: aside, withIntermediateDirectories: true)
                try? manager.moveItem(at: folder, to: aside.appendingPathComponent(name, isDirectory: true))
                log("a crash record crashed its own processing \(maxAttempts) times: set aside in \(aside.path)")
            } else {
                pending.append(folder)
            }
        }
        return (pending, crashed)
    }

    /// How many times processing of the record in `folder` began.
    static func attempts(_ folder: URL) -> Int {
        (try? String(contentsOf: folder.appendingPathComponent("attempts"), encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 0
    }

    /// Background processing of the previous run's records, waited for by `flush`.
    static let processing = DispatchGroup()

    /// Turns each record moved aside by ``takePrevious(directory:log:)`` into a report on a
    /// background thread and hands it to `submit` (which queues it durably), then deletes
    /// it. Before a record is parsed its attempt count is raised on disk, so a record that
    /// crashes the process while being processed is set aside after ``maxAttempts`` starts
    /// instead of crashing every launch.
    static func processPrevious(
        _ folders: [URL], app: AppInfo, device: DeviceInfo, now: @escaping @Sendable () -> Date,
        submit: @escaping @Sendable (Report) -> Void
    ) {
        guard !folders.isEmpty else { return }
        processing.enter()
        let thread = Thread {
            defer { processing.leave() }
            for folder in folders {
                let count = attempts(folder) + 1
                try? writeFileAtomically(Data("\(count)\n".utf8), to: folder.appendingPathComponent("attempts"))
                if let report = report(
                    record: folder.appendingPathComponent("record"), session: folder.appendingPathComponent("session.json"),
                    app: app, device: device, now: now())
                {
                    submit(report)
                }
                try? FileManager.default.removeItem(at: folder)
            }
        }
        thread.name = "CrashGuard.previous-crash"
        thread.start()
    }

    /// Waits until the previous run's records are queued, at most `timeout`.
    static func waitForPrevious(timeout: Duration) async {
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                _ = processing.wait(timeout: .now() + seconds)
                continuation.resume()
            }
        }
    }

    /// Test hook: the processing of a previous record crashes the process (a bug in the parser).
    nonisolated(unsafe) static var crashWhileProcessing = false

    /// Builds the `signal` report with the id the handler wrote (a re-sent crash is a
    /// duplicate): the runtime's message as the reason, else signal, code and address (and
    /// for a trap, the function that trapped: `-O` builds keep no message); the crashing
    /// thread's frames from the first one that is not crash machinery; in `context` the
    /// signal details, registers, the scope at the crash, the other threads' stacks and the
    /// images the frames fall in (base, size, build id, path) for symbolication on a server.
    static func report(for record: CrashRecord, session: Session?, app: AppInfo, device: DeviceInfo, now: Date) -> Report {
        let signalName = ccrash_signal_name(record.signal).map { String(cString: $0) } ?? "signal \(record.signal)"
        let codeName = ccrash_code_name(record.signal, record.code).map { String(cString: $0) } ?? "code \(record.code)"
        let sent = ccrash_code_is_sent(record.code) != 0  // kill, raise, abort: si_addr is not an address
        let addressText = "0x" + String(record.address, radix: 16)

        let crashedImages = session?.images ?? []
        let symbolicator = CachingSymbolicator(Symbolicator(crashed: crashedImages, current: LoadedImage.current()))
        // An uncaught exception: the throw site's stack, not the abort's.
        let exception = record.exception.flatMap { $0.frames.isEmpty ? nil : $0 }
        let recorded =
            exception?.frames ?? (record.frames.isEmpty && record.pc != 0 ? [record.pc] : record.frames)
        let skipped = machineryPrefix(
            recorded, symbolicator: symbolicator,
            unnamedOnTop: exception == nil ? systemLibraries : systemLibraries + exceptionLibraries)
        let frames = Array(recorded.dropFirst(skipped))
        let stack = frames.prefix(ReportLimits.maxFrames).enumerated().map { i, address in
            symbolicator.frame(i, address: address, isReturnAddress: i + skipped > 0)
        }

        let reason: String
        if let exception = record.exception {
            reason = exception.reason.isEmpty ? exception.name : "\(exception.name): \(exception.reason)"
        } else if let message = record.message {
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
        if let exception = record.exception {
            context.add("exception.name", exception.name)
            context.add("exception.runtime", exception.runtime)
        }
        if let pid = session?.pid { context.add("process.pid", String(pid)) }
        if !record.registers.isEmpty {
            context.add("registers", record.registers.map { "\($0.name)=0x\(String($0.value, radix: 16))" }.joined(separator: " "))
        }
        if record.truncated { context.add("crash.truncated", "the crash handler faulted; the record ends early") }
        if skipped > 0 { context.add("crash.machineryFrames", String(skipped)) }
        // The images the crashing thread's frames fall in, for symbolication on the server
        // (docs/symbolication.md): before the scope, so a full scope never crowds them out.
        var used: [LoadedImage] = []
        for frame in recorded + (exception == nil ? [] : record.frames) {
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
            kind: record.exception == nil ? .signal : .exception,
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
    static func machineryPrefix(
        _ frames: [UInt64], symbolicator: CachingSymbolicator, unnamedOnTop: [String] = systemLibraries
    ) -> Int {
        var count = 0
        for (i, address) in frames.enumerated() where count < frames.count - 1 {
            let resolved = symbolicator.resolve(address, isReturnAddress: i > 0)
            if let symbol = resolved.symbol {
                guard isMachinery(symbol) else { break }
            } else {
                // libc's internals (`__pthread_kill_implementation`) are in no symbol table
                // we can read on the device: an unnamed libc frame on top is signal delivery.
                guard let image = resolved.image, unnamedOnTop.contains(where: { image.hasPrefix($0) }) else { break }
            }
            count += 1
        }
        return count
    }

    /// The C libraries whose unnamed frames on top of a crash are signal delivery.
    static let systemLibraries = ["libc.so", "libc-", "libpthread", "libsystem_kernel", "libsystem_pthread", "libsystem_c"]

    /// The runtimes whose unnamed frames on top of an exception's stack are its throw and
    /// terminate machinery (`__cxxabiv1::__terminate` is a local symbol of libstdc++).
    static let exceptionLibraries = ["libstdc++", "libc++abi", "libc++.", "libgcc_s", "libobjc", "libgnustep-base"]

    /// Names of functions that only report or deliver a crash.
    static func isMachinery(_ symbol: String) -> Bool {
        let exact: Set<String> = [
            "raise", "abort", "gsignal", "pthread_kill", "__pthread_kill_implementation", "__pthread_kill_internal",
            "__GI_raise", "__GI_abort", "__restore_rt", "__kernel_rt_sigreturn", "_sigtramp", "__pthread_kill",
            "__abort_with_payload", "abort_with_payload", "__assert_fail", "__assert_fail_base", "__libc_message",
            "__fortify_fail", "__stack_chk_fail", "__chk_fail",
            // Uncaught exceptions: the throw, the terminate handlers, the uncaught-exception handlers.
            "objc_exception_throw", "objc_exception_rethrow", "_objc_terminate", "__exceptionPreprocess",
            "_CFThrowFormattedException", "__cxa_throw", "__cxa_rethrow", "__cxa_call_terminate", "std::terminate",
            "__cxxabiv1::__terminate", "__gnu_cxx::__verbose_terminate_handler", "_NSFoundationUncaughtExceptionHandler",
            "_Unwind_RaiseException", "_Unwind_Resume",
        ]
        if exact.contains(symbol) { return true }
        let base = symbol.split(separator: "(").first.map(String.init) ?? symbol
        if exact.contains(base) { return true }
        if base.hasPrefix("ccrash_") || base.hasPrefix("CGException") || base.hasPrefix("crashguard_objc_exception") {
            return true
        }
        if base.hasPrefix("+[NSException raise") || base.hasPrefix("-[NSException raise") { return true }
        if symbol.hasPrefix("(anonymous namespace)::terminate_hook") || base.hasPrefix("std::__terminate") { return true }
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
