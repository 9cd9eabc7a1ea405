import CrashIngest
import NIOCore

/// Writes a report's `stack`/`fingerprint` (an array of strings) and `context` (an object of
/// strings) as JSON text straight into a bind's buffer: the JSON `text` elements of the ingest
/// transaction's `reports` insert (``JSONColumn``).
///
/// Foundation's `JSONEncoder` was 38 % of the server's CPU on the batch path (see
/// docs/performance.md): it boxes every value, and the text was copied again into the bind.
///
/// Writes into a `ByteBuffer` (a bind, a response) or a `[UInt8]` (``IngestItem/stack``, which
/// a queued report keeps: an array is allocated at its size, a `ByteBuffer` at the next power
/// of two).
enum JSONWriter {
    /// A JSON string, escaped per RFC 8259: `"`, `\` and the control characters U+0000 to
    /// U+001F; everything else (non-ASCII included) is copied as UTF-8. Runs without an escape
    /// are copied whole.
    static func string(_ value: String, into buffer: inout some JSONOutput) {
        buffer.write(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            var start = 0
            while true {
                let i = JSONText.endOfPlainText(bytes, from: start, stoppingAtNonASCII: false)
                buffer.write(UnsafeBufferPointer(rebasing: bytes[start..<i]))
                guard i < bytes.count else { break }
                let byte = bytes[i]
                start = i + 1
                switch byte {
                case UInt8(ascii: "\""): buffer.write("\\\"")
                case UInt8(ascii: "\\"): buffer.write("\\\\")
                case 0x0A: buffer.write("\\n")
                case 0x0D: buffer.write("\\r")
                case 0x09: buffer.write("\\t")
                default:
                    buffer.write("\\u00")
                    buffer.write(hexDigits[Int(byte >> 4)])
                    buffer.write(hexDigits[Int(byte & 0xF)])
                }
            }
        }
        buffer.write(UInt8(ascii: "\""))
    }

    /// A JSON array of strings.
    static func strings(_ values: [String], into buffer: inout some JSONOutput) {
        buffer.write(UInt8(ascii: "["))
        for (i, value) in values.enumerated() {
            if i > 0 { buffer.write(UInt8(ascii: ",")) }
            string(value, into: &buffer)
        }
        buffer.write(UInt8(ascii: "]"))
    }

    /// A JSON object of strings.
    static func object(_ values: [String: String], into buffer: inout some JSONOutput) {
        buffer.write(UInt8(ascii: "{"))
        var first = true
        for (key, value) in values {
            if !first { buffer.write(UInt8(ascii: ",")) }
            first = false
            string(key, into: &buffer)
            buffer.write(UInt8(ascii: ":"))
            string(value, into: &buffer)
        }
        buffer.write(UInt8(ascii: "}"))
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}

/// Where ``JSONWriter`` writes.
protocol JSONOutput {
    mutating func write(_ byte: UInt8)
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>)
}

extension JSONOutput {
    mutating func write(_ text: StaticString) {
        text.withUTF8Buffer { write($0) }
    }
}

extension ByteBuffer: JSONOutput {
    mutating func write(_ byte: UInt8) { writeInteger(byte) }
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) { writeBytes(UnsafeRawBufferPointer(bytes)) }
}

extension [UInt8]: JSONOutput {
    mutating func write(_ byte: UInt8) { append(byte) }
    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) { append(contentsOf: bytes) }
}
