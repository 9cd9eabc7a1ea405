/// JSON string contents: finding their end, measuring and unescaping (RFC 8259 §7), for
/// strings the ``JSONBodyScanner`` has already checked.
public enum JSONText {
    /// The index of the first byte from `start` on that JSON string text cannot hold as it
    /// is (`"`, `\`, a control character below U+0020) or, with `stoppingAtNonASCII`, a
    /// byte of a multi-byte UTF-8 sequence; `bytes.count` when there is none.
    ///
    /// Eight bytes at a time (SWAR): every reader and writer of string text spends most of
    /// its time in runs of plain ASCII, and a byte-at-a-time loop was the largest single cost
    /// of reading a body (docs/performance.md).
    public static func endOfPlainText(
        _ bytes: UnsafeBufferPointer<UInt8>, from start: Int, stoppingAtNonASCII: Bool
    ) -> Int {
        let count = bytes.count
        var i = start
        if let base = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            let nonASCII = stoppingAtNonASCII ? highs : 0
            while i + 8 <= count {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                // A byte's high bit is set where it is below 0x20 or zero after the XOR; a borrow
                // can only mark bytes above the first such byte, so the lowest mark is exact.
                let marks = ((word &- ones &* 0x20) & ~word) | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
                let hits = (marks & highs) | (word & nonASCII)
                if hits != 0 { return i + hits.trailingZeroBitCount / 8 }
                i += 8
            }
        }
        while i < count {
            let c = bytes[i]
            if c == 0x22 || c == 0x5C || c < 0x20 || (stoppingAtNonASCII && c >= 0x80) { return i }
            i += 1
        }
        return count
    }

    /// The bytes between a string's quotes, and whether any escape is among them.
    struct Span {
        var start: Int
        var end: Int
        var escaped: Bool

        var rawCount: Int { end - start }
    }

    /// What a string holds once unescaped.
    enum Measure {
        /// Its length in UTF-8 bytes and whether it holds U+0000.
        case text(count: Int, hasNUL: Bool)
        /// A `\uXXXX` escape of a surrogate that is not part of a pair: no Unicode text.
        case loneSurrogate
    }

    /// Measures `span` without copying it.
    static func measure(_ bytes: UnsafeBufferPointer<UInt8>, _ span: Span) -> Measure {
        // Unescaped, it cannot hold NUL: the scanner refuses raw control characters.
        guard span.escaped else { return .text(count: span.rawCount, hasNUL: false) }
        var count = 0
        var hasNUL = false
        var i = span.start
        while i < span.end {
            let b = bytes[i]
            guard b == 0x5C else {
                count += 1
                i += 1
                continue
            }
            let e = bytes[i + 1]
            guard e == 0x75 else {
                count += 1
                i += 2
                continue
            }
            let unit = hex4(bytes, i + 2)
            i += 6
            switch unit {
            case 0:
                hasNUL = true
                count += 1
            case 0x01..<0x80: count += 1
            case 0x80..<0x800: count += 2
            case 0xD800..<0xDC00:
                guard i + 6 <= span.end, bytes[i] == 0x5C, bytes[i + 1] == 0x75,
                    (0xDC00..<0xE000).contains(hex4(bytes, i + 2))
                else { return .loneSurrogate }
                i += 6
                count += 4
            case 0xDC00..<0xE000: return .loneSurrogate
            default: count += 3
            }
        }
        return .text(count: count, hasNUL: hasNUL)
    }

    /// The string's text; nil when it holds a lone surrogate.
    static func decode(_ bytes: UnsafeBufferPointer<UInt8>, _ span: Span) -> String? {
        let raw = UnsafeBufferPointer(rebasing: bytes[span.start..<span.end])
        guard span.escaped else { return String(decoding: raw, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(span.rawCount)
        guard unescape(bytes, span, appendingTo: &out) else { return nil }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the string's UTF-8 text to `out`; false (and `out` partly written) when it
    /// holds a lone surrogate.
    static func unescape(_ bytes: UnsafeBufferPointer<UInt8>, _ span: Span, appendingTo out: inout [UInt8]) -> Bool {
        var i = span.start
        while i < span.end {
            let b = bytes[i]
            guard b == 0x5C else {
                out.append(b)
                i += 1
                continue
            }
            let e = bytes[i + 1]
            i += 2
            switch e {
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x75:
                var scalar = hex4(bytes, i)
                i += 4
                if (0xD800..<0xDC00).contains(scalar) {
                    guard i + 6 <= span.end, bytes[i] == 0x5C, bytes[i + 1] == 0x75 else { return false }
                    let low = hex4(bytes, i + 2)
                    guard (0xDC00..<0xE000).contains(low) else { return false }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                } else if (0xDC00..<0xE000).contains(scalar) {
                    return false
                }
                appendUTF8(scalar, to: &out)
            default: out.append(e)  // " \ /
            }
        }
        return true
    }

    /// Whether the raw (possibly escaped) string contents `raw` unescape to `text`.
    static func unescapedEquals(_ raw: [UInt8], _ text: StaticString) -> Bool {
        raw.withUnsafeBufferPointer { buffer in
            let span = Span(start: 0, end: buffer.count, escaped: buffer.contains(0x5C))
            if !span.escaped {
                return text.withUTF8Buffer { $0.elementsEqual(buffer) }
            }
            guard let decoded = decode(buffer, span) else { return false }
            return text.withUTF8Buffer { $0.elementsEqual(decoded.utf8) }
        }
    }

    /// The four hex digits at `at` (checked by the scanner) as a UTF-16 code unit.
    private static func hex4(_ bytes: UnsafeBufferPointer<UInt8>, _ at: Int) -> UInt32 {
        var value: UInt32 = 0
        for k in at..<(at + 4) { value = value << 4 | UInt32(hexValue(bytes[k]) ?? 0) }
        return value
    }

    /// A hexadecimal digit's value, either case; nil for any other byte.
    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x41...0x46: return c - 0x41 + 10
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }

    private static func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            out.append(UInt8(scalar))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | scalar >> 6))
            out.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | scalar >> 12))
            out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            out.append(UInt8(0x80 | scalar & 0x3F))
        default:
            out.append(UInt8(0xF0 | scalar >> 18))
            out.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            out.append(UInt8(0x80 | scalar & 0x3F))
        }
    }
}
