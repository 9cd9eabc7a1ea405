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

    // Scans eight bytes at a time: a little-endian word has its first byte in its lowest bits.
    static let ones: UInt64 = 0x0101_0101_0101_0101
    static let highs: UInt64 = 0x8080_8080_8080_8080

    /// The eight bytes from `p + k` as one word.
    @inline(__always) static func word(_ p: UnsafePointer<UInt8>, _ k: Int) -> UInt64 {
        UInt64(littleEndian: UnsafeRawPointer(p).loadUnaligned(fromByteOffset: k, as: UInt64.self))
    }

    /// The high bit of each byte of `x` below `n` (at most 0x80). The lowest flagged byte is
    /// exact: a borrow only runs from a flagged byte to later ones.
    @inline(__always) static func below(_ x: UInt64, _ n: UInt64) -> UInt64 { (x &- ones &* n) & ~x & highs }

    /// The end of the line that starts at `i` (the first `\n` or `\r` from `i` on, or `n`), and
    /// whether the line holds an `@` (without one, no e-mail address starts on it). Reads
    /// eight bytes at a time while none of the three is among them.
    @inline(__always) static func lineEnd(_ p: UnsafePointer<UInt8>, from i: Int, to n: Int) -> (end: Int, hasAt: Bool) {
        var k = i
        while k + 8 <= n {
            let w = word(p, k)
            // A zero byte of one of these where `w` holds `\n`, `\r` or `@`.
            let found = below(w ^ (ones &* 0x0A), 1) | below(w ^ (ones &* 0x0D), 1) | below(w ^ (ones &* 0x40), 1)
            if found != 0 {
                k += found.trailingZeroBitCount >> 3
                break
            }
            k += 8
        }
        var hasAt = false
        while k < n {
            let b = p[k]
            if b == newline || b == carriageReturn { break }
            if b == UInt8(ascii: "@") { hasAt = true }
            k += 1
        }
        return (k, hasAt)
    }

    /// The first index from `k` on (up to `end`) that is not white space: runs of plain
    /// spaces, the padding of crash-log columns, eight bytes at a time.
    @inline(__always) static func skipSpaces(_ p: UnsafePointer<UInt8>, _ k: Int, _ end: Int) -> Int {
        var k = k
        while k + 8 <= end {
            let d = word(p, k) ^ (ones &* 0x20)
            if d != 0 {
                k += d.trailingZeroBitCount >> 3  // the first byte that is not a plain space
                break
            }
            k += 8
        }
        while k < end && isSpace(p[k]) { k += 1 }
        return k
    }

    /// The first index from `k` on (up to `end`) that is white space: eight bytes at a time.
    @inline(__always) static func tokenEnd(_ p: UnsafePointer<UInt8>, _ k: Int, _ end: Int) -> Int {
        var k = k
        while k + 8 <= end {
            let w = word(p, k)
            // A byte below 0x21 (space or a control character), or DEL.
            let found = below(w, 0x21) | below(w ^ (ones &* 0x7F), 1)
            if found != 0 { return k + found.trailingZeroBitCount >> 3 }
            k += 8
        }
        while k < end && !isSpace(p[k]) { k += 1 }
        return k
    }

    /// The first index from `k` on (up to `end`) whose byte is not an ASCII word byte
    /// (letter, digit, `_`, `$`): eight bytes at a time.
    @inline(__always) static func asciiWordEnd(_ p: UnsafePointer<UInt8>, _ k: Int, _ end: Int) -> Int {
        // For bytes below 0x80, the high bit of `x + (0x80 - lo)` says `x >= lo`, with no
        // carry into the next byte.
        @inline(__always) func within(_ x: UInt64, _ lo: UInt64, _ hi: UInt64) -> UInt64 {
            (x &+ ones &* (0x80 - lo)) & ~(x &+ ones &* (0x7F - hi))
        }
        var k = k
        while k + 8 <= end {
            let w = word(p, k)
            let inWord =
                within(w | ones &* 0x20, 0x61, 0x7A) | within(w, 0x30, 0x39) | within(w, 0x5F, 0x5F) | within(w, 0x24, 0x24)
            // A byte of 0x80 or more stops here too (carries from it only reach later bytes).
            let stop = (~inWord & highs) | (w & highs)
            if stop != 0 { return k + stop.trailingZeroBitCount >> 3 }
            k += 8
        }
        while k < end && isASCIIWord(p[k]) { k += 1 }
        return k
    }

    /// The index after the last `b` in `p[from..<to]`, or `from` when there is none: eight
    /// bytes at a time, from the end.
    @inline(__always) static func afterLast(_ b: UInt8, _ p: UnsafePointer<UInt8>, _ from: Int, _ to: Int) -> Int {
        var k = to
        while k - 8 >= from {
            let x = word(p, k - 8) ^ (ones &* UInt64(b))
            // The high bit of each byte that is zero in `x` (exact for every byte).
            let zero = ~(((x & ~highs) &+ ~highs) | x) & highs
            if zero != 0 { return k - 8 + (63 - zero.leadingZeroBitCount) >> 3 + 1 }
            k -= 8
        }
        while k > from && p[k - 1] != b { k -= 1 }
        return k
    }

    /// Whether the `n` bytes at `a` and at `b` are the same: eight at a time.
    @inline(__always) static func equal(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        let x = UnsafeRawPointer(a)
        let y = UnsafeRawPointer(b)
        if n >= 8 {
            var k = 0
            while k + 8 < n {
                if x.loadUnaligned(fromByteOffset: k, as: UInt64.self) != y.loadUnaligned(fromByteOffset: k, as: UInt64.self) {
                    return false
                }
                k += 8
            }
            // The last eight bytes (overlapping the ones compared).
            return x.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self) == y.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
        }
        for k in 0..<n where a[k] != b[k] { return false }
        return true
    }

    /// Whether `bytes` are ASCII without a line break (`\n` or `\r`).
    static func isOneASCIILine(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let n = bytes.count
        var k = 0
        if let p = bytes.baseAddress {
            while k + 8 <= n {
                let w = word(p, k)
                // A byte of 0x80 or more, `\n` or `\r`.
                if (w & highs) | below(w ^ (ones &* 0x0A), 1) | below(w ^ (ones &* 0x0D), 1) != 0 { return false }
                k += 8
            }
        }
        while k < n {
            let b = bytes[k]
            if b >= 0x80 || b == newline || b == carriageReturn { return false }
            k += 1
        }
        return true
    }

    /// Calls `body` with the UTF-8 bytes of `text`: in place for a native string (no copy,
    /// no retain), through `withUTF8` otherwise.
    @inline(__always) static func withUTF8<R>(_ text: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
        var text = text
        return text.withUTF8(body)
    }

    /// The scalar whose UTF-8 sequence starts at `k` (bytes at `end` and past it read as 0).
    static func scalar(_ src: UnsafeBufferPointer<UInt8>, at k: Int, end: Int) -> UInt32 {
        @inline(__always) func at(_ k: Int) -> UInt8 { k < end ? src[k] : 0 }
        let b0 = UInt32(at(k))
        switch sequenceLength(UInt8(b0)) {
        case 2: return (b0 & 0x1F) << 6 | UInt32(at(k + 1) & 0x3F)
        case 3: return (b0 & 0x0F) << 12 | UInt32(at(k + 1) & 0x3F) << 6 | UInt32(at(k + 2) & 0x3F)
        case 4:
            return (b0 & 0x07) << 18 | UInt32(at(k + 1) & 0x3F) << 12 | UInt32(at(k + 2) & 0x3F) << 6
                | UInt32(at(k + 3) & 0x3F)
        default: return b0
        }
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

/// A byte buffer written at the normalizer's speed: no per-append uniqueness or capacity
/// bookkeeping of `Array`, one capacity test per write. Its memory belongs to whoever made
/// it: either borrowed (a scratch buffer on the caller's stack) or allocated by `grow`, and
/// then freed by `release()`.
struct OutputBuffer {
    private(set) var base: UnsafeMutablePointer<UInt8>
    var count = 0
    private(set) var capacity: Int
    /// `base` was allocated here (by `grow` or `init(capacity:)`), not borrowed.
    private var owned: Bool

    /// A buffer over borrowed memory: it never frees `memory`, and moves to its own
    /// allocation when a write does not fit.
    init(borrowing memory: UnsafeMutableBufferPointer<UInt8>) {
        base = memory.baseAddress!
        capacity = memory.count
        owned = false
    }

    init(capacity: Int) {
        let capacity = max(capacity, 16)
        base = .allocate(capacity: capacity)
        self.capacity = capacity
        owned = true
    }

    /// Frees the memory the buffer allocated (never borrowed memory).
    mutating func release() {
        if owned { base.deallocate() }
        owned = false
        capacity = 0
        count = 0
    }

    var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }

    var isEmpty: Bool { count == 0 }

    var last: UInt8? { count > 0 ? base[count - 1] : nil }

    subscript(i: Int) -> UInt8 { base[i] }

    @inline(__always) mutating func append(_ b: UInt8) {
        if count == capacity { grow(1) }
        base[count] = b
        count += 1
    }

    @inline(__always) mutating func append(_ p: UnsafePointer<UInt8>, count n: Int) {
        if n > capacity - count { grow(n) }
        let to = base + count
        if n <= 16 {
            // A word: two overlapping eight-byte moves, or a few bytes (no call to memmove).
            if n >= 8 {
                let from = UnsafeRawPointer(p)
                let first = from.loadUnaligned(as: UInt64.self)
                let last = from.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
                UnsafeMutableRawPointer(to).storeBytes(of: first, as: UInt64.self)
                UnsafeMutableRawPointer(to).storeBytes(of: last, toByteOffset: n - 8, as: UInt64.self)
            } else {
                for i in 0..<n { to[i] = p[i] }
            }
        } else {
            to.update(from: p, count: n)
        }
        count += n
    }

    @inline(__always) mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        if let p = bytes.baseAddress { append(p, count: bytes.count) }
    }

    @inline(__always) mutating func append(_ s: StaticString) {
        append(s.utf8Start, count: s.utf8CodeUnitCount)
    }

    @inline(__always) mutating func removeLast() { count -= 1 }

    mutating func removeAll() { count = 0 }

    @inline(never) private mutating func grow(_ n: Int) {
        let capacity = max(2 * self.capacity, count + n, 64)
        let fresh = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        fresh.update(from: base, count: count)
        if owned { base.deallocate() }
        base = fresh
        self.capacity = capacity
        owned = true
    }

    /// Whether both buffers hold the same bytes.
    func holdsSameBytes(as other: OutputBuffer) -> Bool {
        count == other.count && Bytes.equal(base, other.base, count)
    }
}
