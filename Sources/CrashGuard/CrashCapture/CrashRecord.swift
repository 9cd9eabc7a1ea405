import Foundation

/// What the signal handler wrote into the record file, parsed on the next start.
///
/// The file is line-based text the handler can produce with `write` alone:
/// ```
/// CGCRASH 1
/// time <unix seconds> <milliseconds>
/// signal <number>
/// code <si_code>
/// address 0x<si_addr>
/// pc 0x<program counter>
/// frame 0x<address>          (innermost first, repeated)
/// message                    (only when the Swift runtime left a fatal error message)
/// <message bytes, any number of lines>
/// end
/// ```
struct CrashRecord: Equatable, Sendable {
    var time: Date?
    var signal: Int32
    var code: Int32
    var address: UInt64
    var pc: UInt64
    var frames: [UInt64]
    var message: String?

    /// Parses a record; `nil` when the file is empty or not a record.
    init?(parsing data: Data) {
        let bytes = [UInt8](data)
        guard bytes.starts(with: Array("CGCRASH ".utf8)) else { return nil }
        let marker = Array("\nmessage\n".utf8)
        var headerEnd = bytes.count
        var message: String?
        if let range = Self.firstRange(of: marker, in: bytes) {
            headerEnd = range.lowerBound + 1
            var body = Array(bytes[range.upperBound...])
            let end = Array("\nend\n".utf8)
            if body.count >= end.count, Array(body.suffix(end.count)) == end { body.removeLast(end.count) }
            message = String(decoding: body, as: UTF8.self)
        }
        var signal: Int32?
        var time: Date?
        var code: Int32 = 0
        var address: UInt64 = 0
        var pc: UInt64 = 0
        var frames: [UInt64] = []
        for line in String(decoding: bytes[..<headerEnd], as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count >= 2 else { continue }
            switch parts[0] {
            case "time":
                if let seconds = Double(parts[1]) {
                    let millis = parts.count > 2 ? Double(parts[2]) ?? 0 : 0
                    time = Date(timeIntervalSince1970: seconds + millis / 1000)
                }
            case "signal": signal = Int32(parts[1])
            case "code": code = Int32(parts[1]) ?? 0
            case "address": address = Self.hex(parts[1]) ?? 0
            case "pc": pc = Self.hex(parts[1]) ?? 0
            case "frame": if let frame = Self.hex(parts[1]) { frames.append(frame) }
            default: break
            }
        }
        guard let signal else { return nil }
        self.time = time
        self.signal = signal
        self.code = code
        self.address = address
        self.pc = pc
        self.frames = frames
        let trimmed = message?.trimmingCharacters(in: .whitespacesAndNewlines)
        self.message = trimmed?.isEmpty == false ? trimmed : nil
    }

    private static func hex(_ text: Substring) -> UInt64? {
        UInt64(text.hasPrefix("0x") ? text.dropFirst(2) : text, radix: 16)
    }

    private static func firstRange(of needle: [UInt8], in haystack: [UInt8]) -> Range<Int>? {
        guard needle.count <= haystack.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<(start + needle.count)]) == needle { return start..<(start + needle.count) }
        }
        return nil
    }
}
