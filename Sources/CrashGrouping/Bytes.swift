/// Byte and scalar classes used by the normalizer. All of it is plain arithmetic on UTF-8
/// bytes: no tables to initialize, no Foundation, no regular expressions.
enum Bytes {
    static let space: UInt8 = 0x20
    static let tab: UInt8 = 0x09
    static let newline: UInt8 = 0x0A
    static let carriageReturn: UInt8 = 0x0D

    @inline(__always) static func isDigit(_ b: UInt8) -> Bool { b &- 0x30 < 10 }
    @inline(__always) static func isAlpha(_ b: UInt8) -> Bool { (b | 0x20) &- 0x61 < 26 }
    @inline(__always) static func isLower(_ b: UInt8) -> Bool { b &- 0x61 < 26 }
    @inline(__always) static func isAlnum(_ b: UInt8) -> Bool { isDigit(b) || isAlpha(b) }
    @inline(__always) static func isHex(_ b: UInt8) -> Bool { isDigit(b) || (b | 0x20) &- 0x61 < 6 }
    @inline(__always) static func isLowerHexLetter(_ b: UInt8) -> Bool { b &- 0x61 < 6 }
    @inline(__always) static func isUpperHexLetter(_ b: UInt8) -> Bool { b &- 0x41 < 6 }

    /// Space, tab and every other control character (NUL included) count as white space.
    /// Line breaks never reach this test: lines are split first.
    @inline(__always) static func isSpace(_ b: UInt8) -> Bool { b <= 0x20 || b == 0x7F }

    /// ASCII bytes that belong to a word: letters, digits, `_` and `$` (Swift mangled names).
    @inline(__always) static func isASCIIWord(_ b: UInt8) -> Bool {
        isAlnum(b) || b == 0x5F || b == 0x24
    }

    /// Length of the UTF-8 sequence that starts with `lead`.
    @inline(__always) static func sequenceLength(_ lead: UInt8) -> Int {
        if lead < 0x80 { return 1 }
        if lead >= 0xF0 { return 4 }
        if lead >= 0xE0 { return 3 }
        if lead >= 0xC0 { return 2 }
        return 1  // a continuation byte: never a character start in valid UTF-8
    }

    /// Whether a non-ASCII scalar is part of a word (letters of most scripts) or a boundary
    /// (punctuation, symbols, emoji, and the CJK and Hangul blocks, where text has no spaces
    /// and a number written next to a character is still a number).
    @inline(__always) static func isWordScalar(_ v: UInt32) -> Bool {
        switch v {
        case 0x80...0xBF: return false  // C1 controls, Latin-1 punctuation, NBSP
        case 0x2000...0x2BFF: return false  // general punctuation, symbols, arrows
        case 0x3000...0x9FFF: return false  // CJK symbols, kana, CJK ideographs
        case 0xAC00...0xD7AF: return false  // Hangul syllables
        case 0xFE00...0xFE0F: return false  // variation selectors
        case 0xFF00...0xFFFF: return false  // full-width forms, U+FFFD
        case 0x1F000...0x1FAFF: return false  // emoji (the backtracer's 💣)
        default: return true
        }
    }
}
