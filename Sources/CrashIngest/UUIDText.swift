import Foundation

/// UUIDs read from text strictly, by hand, for both ingest doors.
///
/// Foundation's `UUID(uuidString:)` costs about 1 µs on Linux (`sscanf`, 1 % of the server's CPU
/// per report) and is lenient: it reads a sign or a space in place of a hex digit (`-3` as 0xFD).
public enum UUIDText {
    /// The UUID in `text`: 8-4-4-4-12 hexadecimal digits of either case (RFC 9562's form) or, when
    /// `compact`, also the 32 digits without hyphens (Sentry's `event_id`). Nothing else: no
    /// braces, no `urn:uuid:`, no white space.
    public static func parse(_ text: String, compact: Bool = false) -> UUID? {
        var text = text
        return text.withUTF8 { b -> UUID? in
            let hyphenated = b.count == 36
            if hyphenated {
                guard b[8] == 0x2D, b[13] == 0x2D, b[18] == 0x2D, b[23] == 0x2D else { return nil }
            } else if !(compact && b.count == 32) {
                return nil
            }
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let ok = withUnsafeMutableBytes(of: &bytes) { out -> Bool in
                var i = 0
                for n in 0..<16 {
                    if hyphenated, i == 8 || i == 13 || i == 18 || i == 23 { i += 1 }
                    guard let high = JSONText.hexValue(b[i]), let low = JSONText.hexValue(b[i + 1]) else { return false }
                    out[n] = high << 4 | low
                    i += 2
                }
                return true
            }
            return ok ? UUID(uuid: bytes) : nil
        }
    }
}
