import CrashWire
import Foundation

extension ReportLimits {
    /// `text` without NULs, cut to at most `limit` UTF-8 bytes at a character boundary.
    ///
    /// The Apple and Sentry doors clip the fields of the reports they build with this one
    /// function, so a field's stored form does not depend on the door it came through.
    public static func clip(_ text: String, _ limit: Int) -> String {
        var text = text
        if text.utf8.contains(0) { text = text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") }
        guard text.utf8.count > limit else { return text }
        let bytes = Array(text.utf8)
        var end = limit
        while end > 0, bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: bytes[..<end], as: UTF8.self)
    }
}
