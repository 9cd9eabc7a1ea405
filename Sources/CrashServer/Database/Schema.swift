/// The database schema: `schema.sql`, embedded, and split into statements.
public enum Schema {
    /// The text of schema.sql, compiled in by SwiftPM (`.embedInCode`, see Package.swift).
    static let sql = String(decoding: PackageResources.schema_sql, as: UTF8.self)

    /// Lock id that serializes migrations of several replicas starting at once.
    static let migrationLockID: Int64 = 0x4372_6173_6847_7264  // "CrashGrd"

    /// The statements of ``sql``, split on `;` outside quotes, dollar quotes and comments.
    static var statements: [String] { split(sql) }

    /// Splits SQL text into statements; understands `'...'`, `"..."`, `$tag$...$tag$`,
    /// `-- ...` and `/* ... */`.
    static func split(_ text: String) -> [String] {
        let bytes = Array(text.utf8)
        var statements: [String] = []
        var start = 0
        var i = 0
        func flush(_ end: Int) {
            let piece = String(decoding: bytes[start..<end], as: UTF8.self)
            let trimmed = piece.trimmingWhitespace()
            if !trimmed.isEmpty, !isOnlyComments(trimmed) { statements.append(trimmed) }
        }
        while i < bytes.count {
            let c = bytes[i]
            switch c {
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                i += 1
                while i < bytes.count, bytes[i] != c { i += 1 }
                i += 1
            case UInt8(ascii: "-") where i + 1 < bytes.count && bytes[i + 1] == UInt8(ascii: "-"):
                while i < bytes.count, bytes[i] != UInt8(ascii: "\n") { i += 1 }
            case UInt8(ascii: "/") where i + 1 < bytes.count && bytes[i + 1] == UInt8(ascii: "*"):
                i += 2
                while i + 1 < bytes.count, !(bytes[i] == UInt8(ascii: "*") && bytes[i + 1] == UInt8(ascii: "/")) { i += 1 }
                i += 2
            case UInt8(ascii: "$"):
                var j = i + 1
                while j < bytes.count, bytes[j] == UInt8(ascii: "_") || (bytes[j] | 0x20 >= 97 && bytes[j] | 0x20 <= 122) { j += 1 }
                guard j < bytes.count, bytes[j] == UInt8(ascii: "$") else {
                    i += 1
                    continue
                }
                let tag = Array(bytes[i...j])
                i = j + 1
                while i < bytes.count, !bytes[i...].starts(with: tag) { i += 1 }
                i += tag.count
            case UInt8(ascii: ";"):
                flush(i)
                i += 1
                start = i
            default:
                i += 1
            }
        }
        if start < bytes.count { flush(bytes.count) }
        return statements
    }

    private static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingWhitespace().isEmpty || $0.trimmingWhitespace().hasPrefix("--") }
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return String(s)
    }
}
