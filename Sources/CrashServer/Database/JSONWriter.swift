import CrashWire
import Foundation

/// A minimal JSON text writer for the ingest transaction's `json_to_recordset` parameters.
///
/// Foundation's `JSONEncoder` was 38 % of the server's CPU on the batch path (see
/// docs/performance.md): it boxes every value. This writes straight into a byte buffer.
struct JSONWriter {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    /// The text written so far.
    var text: String { String(decoding: bytes, as: UTF8.self) }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// A JSON string, escaped per RFC 8259.
    mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): raw("\\\"")
            case UInt8(ascii: "\\"): raw("\\\\")
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0..<0x20:
                raw("\\u00")
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default:
                bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func string(_ value: String?) {
        if let value { string(value) } else { raw("null") }
    }

    mutating func number(_ value: Int64) {
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func bool(_ value: Bool?) {
        switch value {
        case .some(true): raw("true")
        case .some(false): raw("false")
        case .none: raw("null")
        }
    }

    /// A date as an RFC 3339 string.
    mutating func date(_ value: Date) {
        string(RFC3339.format(value))
    }

    mutating func uuid(_ value: UUID) {
        string(value.uuidString)
    }

    /// An array of strings, or null.
    mutating func strings(_ values: [String]?) {
        guard let values else { return raw("null") }
        bytes.append(UInt8(ascii: "["))
        for (i, value) in values.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            string(value)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// An object of strings, or null.
    mutating func object(_ values: [String: String]?) {
        guard let values else { return raw("null") }
        bytes.append(UInt8(ascii: "{"))
        var first = true
        for (key, value) in values {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            string(key)
            bytes.append(UInt8(ascii: ":"))
            string(value)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// `[row, row, ...]` with `body` writing each row as an object.
    static func rows<S: Sequence>(_ items: S, capacity: Int = 0, _ body: (inout JSONWriter, S.Element) -> Void) -> String {
        var writer = JSONWriter(capacity: capacity)
        writer.bytes.append(UInt8(ascii: "["))
        var first = true
        for item in items {
            if !first { writer.bytes.append(UInt8(ascii: ",")) }
            first = false
            writer.bytes.append(UInt8(ascii: "{"))
            body(&writer, item)
            writer.bytes.append(UInt8(ascii: "}"))
        }
        writer.bytes.append(UInt8(ascii: "]"))
        return writer.text
    }

    /// `"name":` before a field's value.
    mutating func key(_ name: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        raw("\":")
    }
}
