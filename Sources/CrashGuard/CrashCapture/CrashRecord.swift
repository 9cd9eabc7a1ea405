import Foundation

/// What the signal handler wrote into the record file, parsed on the next start.
///
/// The file is line-based text the handler can produce with `write` alone; the header is
/// written (and flushed) before any stack is walked:
/// ```
/// CGCRASH 2
/// id <report UUID, fixed at install time>
/// time <unix seconds> <milliseconds>
/// signal <number>
/// code <si_code>
/// address 0x<si_addr>
/// pc 0x<program counter>
/// insn <the 4 bytes at pc, hex>          (when readable)
/// register <name> 0x<value>              (the crashing thread's, repeated)
/// exception <objc|cxx>                   (an uncaught exception noted before the abort)
/// exception.name <length>                (its name or C++ type)
/// <length bytes>
/// exception.reason <length>              (its reason or what())
/// <length bytes>
/// exception.frame 0x<address>            (the throw site's stack, innermost first, repeated)
/// message <length>                       (the Swift runtime's fatal error message)
/// <length bytes>
/// scope <length>                         (user, tags, context, breadcrumbs: key\tvalue lines)
/// <length bytes>
/// thread <tid> crashing <name>
/// frame 0x<address>                      (innermost first, repeated)
/// thread <tid> other <name>              (every other thread that answered, with frames)
/// unanswered <count>                     (threads signalled that did not answer in time)
/// truncated <signal>                     (the handler itself faulted: the record ends here)
/// end
/// ```
/// Version 1 records (no id, no threads, a `message` block up to `end`) still parse.
struct CrashRecord: Equatable, Sendable {
    /// One scope entry.
    struct ScopeEntry: Equatable, Sendable {
        var key: String
        var value: String
    }

    /// An uncaught Objective-C or C++ exception the process died of.
    struct Exception: Equatable, Sendable {
        /// `objc` or `cxx`.
        var runtime: String
        /// The exception's name (`NSRangeException`) or C++ type (`std::runtime_error`).
        var name: String
        /// Its reason or `what()`.
        var reason: String
        /// Return addresses at the throw, innermost first.
        var frames: [UInt64]
    }

    /// One thread's stack.
    struct ThreadStack: Equatable, Sendable {
        var id: Int
        var name: String
        var crashing: Bool
        var frames: [UInt64]
    }

    var version: Int
    var id: UUID?
    var time: Date?
    var signal: Int32
    var code: Int32
    var address: UInt64
    var pc: UInt64
    /// The bytes at `pc` (`0f0b` is x86's `ud2`, the trap Swift's runtime checks compile to).
    var instruction: [UInt8]
    /// The crashing thread's registers, in the order written.
    var registers: [(name: String, value: UInt64)]
    var message: String?
    /// The uncaught exception behind the signal, when one was noted.
    var exception: Exception?
    /// The scope at the crash, in the order the SDK wrote it (see ``Scope``).
    var scope: [ScopeEntry]
    /// The crashing thread first, then the others.
    var threads: [ThreadStack]
    var unanswered: Int
    /// The handler faulted while writing: what follows the last whole line is missing.
    var truncated: Bool

    /// The crashing thread's frames.
    var frames: [UInt64] { threads.first { $0.crashing }?.frames ?? [] }

    static func == (a: CrashRecord, b: CrashRecord) -> Bool {
        a.id == b.id && a.time == b.time && a.signal == b.signal && a.code == b.code && a.address == b.address
            && a.pc == b.pc && a.instruction == b.instruction && a.exception == b.exception
            && a.registers.map { $0.name } == b.registers.map { $0.name }
            && a.registers.map { $0.value } == b.registers.map { $0.value } && a.message == b.message && a.scope == b.scope
            && a.threads == b.threads && a.unanswered == b.unanswered && a.truncated == b.truncated
    }

    /// Parses a record; `nil` when the file is empty or not a record.
    init?(parsing data: Data) {
        let bytes = [UInt8](data)
        guard bytes.starts(with: Array("CGCRASH ".utf8)) else { return nil }
        var version = 1
        var id: UUID?
        var signal: Int32?
        var time: Date?
        var code: Int32 = 0
        var address: UInt64 = 0
        var pc: UInt64 = 0
        var instruction: [UInt8] = []
        var registers: [(name: String, value: UInt64)] = []
        var message: String?
        var exception: Exception?
        var scope: [ScopeEntry] = []
        var threads: [ThreadStack] = []
        var unanswered = 0
        var truncated = false

        var at = 0
        func nextLine() -> String? {
            guard at < bytes.count else { return nil }
            let end = bytes[at...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            defer { at = min(end + 1, bytes.count) }
            return String(decoding: bytes[at..<end], as: UTF8.self)
        }
        /// `length` raw bytes after a `message`/`scope` line, then its newline.
        func block(_ length: Int) -> String {
            let end = min(at + max(length, 0), bytes.count)
            defer { at = min(end + 1, bytes.count) }
            return String(decoding: bytes[at..<end], as: UTF8.self)
        }

        while let line = nextLine() {
            let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: true)
            guard let word = parts.first else { continue }
            switch word {
            case "CGCRASH": version = parts.count > 1 ? Int(parts[1]) ?? 1 : 1
            case "id": if parts.count > 1 { id = UUID(uuidString: String(parts[1])) }
            case "time":
                if parts.count > 1, let seconds = Double(parts[1]) {
                    let millis = parts.count > 2 ? Double(parts[2]) ?? 0 : 0
                    time = Date(timeIntervalSince1970: seconds + millis / 1000)
                }
            case "signal": if parts.count > 1 { signal = Int32(parts[1]) }
            case "code": if parts.count > 1 { code = Int32(parts[1]) ?? 0 }
            case "address": if parts.count > 1 { address = Self.hex(parts[1]) ?? 0 }
            case "pc": if parts.count > 1 { pc = Self.hex(parts[1]) ?? 0 }
            case "insn":
                if parts.count > 1 {
                    let text = Array(parts[1].utf8)
                    instruction = stride(from: 0, to: text.count - 1, by: 2).compactMap {
                        UInt8(String(decoding: text[$0..<($0 + 2)], as: UTF8.self), radix: 16)
                    }
                }
            case "register":
                if parts.count > 2, let value = Self.hex(parts[2]) { registers.append((String(parts[1]), value)) }
            case "message":
                if parts.count > 1, let length = Int(parts[1]) {
                    message = block(length)
                } else {
                    // Version 1: the message runs to the closing `end`.
                    var body = Array(bytes[at...])
                    let end = Array("\nend\n".utf8)
                    if body.count >= end.count, Array(body.suffix(end.count)) == end { body.removeLast(end.count) }
                    message = String(decoding: body, as: UTF8.self)
                    at = bytes.count
                }
            case "exception":
                exception = Exception(runtime: parts.count > 1 ? String(parts[1]) : "", name: "", reason: "", frames: [])
            case "exception.name":
                if parts.count > 1, let length = Int(parts[1]) { exception?.name = block(length) }
            case "exception.reason":
                if parts.count > 1, let length = Int(parts[1]) { exception?.reason = block(length) }
            case "exception.frame":
                if parts.count > 1, let frame = Self.hex(parts[1]) { exception?.frames.append(frame) }
            case "scope":
                if parts.count > 1, let length = Int(parts[1]) {
                    for entry in block(length).split(separator: "\n") {
                        let pair = entry.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
                        if pair.count == 2, !pair[0].isEmpty { scope.append(ScopeEntry(key: String(pair[0]), value: String(pair[1]))) }
                    }
                }
            case "thread":
                if parts.count > 2, let tid = Int(parts[1]) {
                    threads.append(
                        ThreadStack(
                            id: tid, name: parts.count > 3 ? String(parts[3]) : "", crashing: parts[2] == "crashing",
                            frames: []))
                }
            case "frame":
                guard parts.count > 1, let frame = Self.hex(parts[1]) else { break }
                if threads.isEmpty { threads.append(ThreadStack(id: 0, name: "", crashing: true, frames: [])) }
                threads[threads.count - 1].frames.append(frame)
            case "unanswered": if parts.count > 1 { unanswered = Int(parts[1]) ?? 0 }
            case "truncated": truncated = true
            default: break
            }
        }
        guard let signal else { return nil }
        if !threads.contains(where: \.crashing) {
            threads.insert(ThreadStack(id: 0, name: "", crashing: true, frames: []), at: 0)
        }
        self.version = version
        self.id = id
        self.time = time
        self.signal = signal
        self.code = code
        self.address = address
        self.pc = pc
        self.instruction = instruction
        self.registers = registers
        let trimmed = message?.trimmingCharacters(in: .whitespacesAndNewlines)
        self.message = trimmed?.isEmpty == false ? trimmed : nil
        self.exception = exception
        self.scope = scope
        self.threads = threads
        self.unanswered = unanswered
        self.truncated = truncated
    }

    private static func hex(_ text: Substring) -> UInt64? {
        UInt64(text.hasPrefix("0x") ? text.dropFirst(2) : text, radix: 16)
    }
}
