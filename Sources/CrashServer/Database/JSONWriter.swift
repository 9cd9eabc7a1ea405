import NIOCore

/// Writes a report's `stack`/`fingerprint` (an array of strings) and `context` (an object of
/// strings) as JSON text straight into a bind's buffer: the `jsonb` elements of the ingest
/// transaction's `reports` insert (``JSONBValue``).
///
/// Foundation's `JSONEncoder` was 38 % of the server's CPU on the batch path (see
/// docs/performance.md): it boxes every value, and the text was copied again into the bind.
enum JSONWriter {
    /// A JSON string, escaped per RFC 8259: `"`, `\` and the control characters U+0000 to
    /// U+001F; everything else (non-ASCII included) is copied as UTF-8. Runs without an escape
    /// are copied whole.
    static func string(_ value: String, into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            var start = 0
            for i in 0..<bytes.count {
                let byte = bytes[i]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start..<i])))
                start = i + 1
                switch byte {
                case UInt8(ascii: "\""): buffer.writeStaticString("\\\"")
                case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
                case 0x0A: buffer.writeStaticString("\\n")
                case 0x0D: buffer.writeStaticString("\\r")
                case 0x09: buffer.writeStaticString("\\t")
                default:
                    buffer.writeStaticString("\\u00")
                    buffer.writeInteger(hexDigits[Int(byte >> 4)])
                    buffer.writeInteger(hexDigits[Int(byte & 0xF)])
                }
            }
            buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start...])))
        }
        buffer.writeInteger(UInt8(ascii: "\""))
    }

    /// A JSON array of strings.
    static func strings(_ values: [String], into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "["))
        for (i, value) in values.enumerated() {
            if i > 0 { buffer.writeInteger(UInt8(ascii: ",")) }
            string(value, into: &buffer)
        }
        buffer.writeInteger(UInt8(ascii: "]"))
    }

    /// A JSON object of strings.
    static func object(_ values: [String: String], into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "{"))
        var first = true
        for (key, value) in values {
            if !first { buffer.writeInteger(UInt8(ascii: ",")) }
            first = false
            string(key, into: &buffer)
            buffer.writeInteger(UInt8(ascii: ":"))
            string(value, into: &buffer)
        }
        buffer.writeInteger(UInt8(ascii: "}"))
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}
