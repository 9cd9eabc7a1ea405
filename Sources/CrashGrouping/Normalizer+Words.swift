// Words: names, user directories, source lines and KVO change values.

extension Normalizer {
    /// A token that starts with a letter, `_`, `$` or a non-ASCII letter. Each matcher's
    /// first test is made here, inline, so that a plain word pays no call for the matchers
    /// it cannot start.
    mutating func word(_ j: Int) -> Int {
        let b = src[j]
        if Bytes.isHex(b) {
            if j + 36 <= line.end && src[j + 8] == UInt8(ascii: "-"), let k = uuid(j) { return placeholder("<uuid>", end: k) }
            if j + 16 <= line.end && Bytes.isHex(src[j + 1]), let k = hexDigest(j) { return placeholder("<hex>", end: k) }
        }
        if b < 0x80 && line.hasAt && j >= emailFailEnd, let k = email(j) { return placeholder("<email>", end: k) }
        let k = scanWord(j, letterStart: true)
        if j > line.start && src[j - 1] == UInt8(ascii: "/"), let m = userDirectory(j, k) { return m }
        emitRaw(j, k)
        line.lastWasAddress = false
        if k < line.end && src[k] == UInt8(ascii: ":"), let m = sourceLine(j, k) {
            line.armed = false
            line.lineArmed = false
            return m
        }
        if k - j == 3, let m = changeValue(j, k) { return m }
        line.armed = Keywords.isErrorCodeKeyword(src, j, k)
        line.lineArmed = k - j == 4 && Keywords.equalsLower(src, j, k, "line")
        return k
    }

    /// Scans a word: letters, digits, `_`, `$`, non-ASCII letters, and, in a word that
    /// starts with a letter, the joiners that keep names whole: `.` before a digit
    /// (`libc.so.6`, `python3.11`), `,` between digits (`iPhone14,2`) and `-` before a
    /// digit in a word without lowercase letters (`UTF-8`, `ISO-8859-1`, `SHA-256`).
    func scanWord(_ j: Int, letterStart: Bool) -> Int { Self.scanWord(src, j, end: line.end, letterStart: letterStart) }

    /// ``scanWord(_:letterStart:)`` over the line `src[..<end]` (the fixed-point check reads
    /// words with it too).
    static func scanWord(_ src: UnsafeBufferPointer<UInt8>, _ j: Int, end: Int, letterStart: Bool) -> Int {
        guard let p = src.baseAddress else { return j }
        var k = j
        while k < end {
            k = Bytes.asciiWordEnd(p, k, end)
            guard k < end else { break }
            let b = p[k]
            if b >= 0x80 {
                if !Bytes.isWordScalar(Bytes.scalar(src, at: k, end: end)) { break }
                k += Bytes.sequenceLength(b)
                continue
            }
            // A joiner before a digit. What the word holds so far is read only here: the
            // last byte (a digit for `,`), and any lowercase or non-ASCII letter (none for `-`).
            if letterStart && k + 1 < end && Bytes.isDigit(p[k + 1]) {
                if b == UInt8(ascii: ".") || (b == UInt8(ascii: ",") && k > j && Bytes.isDigit(p[k - 1]))
                    || (b == UInt8(ascii: "-") && !hasLowercase(p, j, k))
                {
                    k += 1
                    continue
                }
            }
            break
        }
        return min(k, end)
    }

    /// Whether `p[j..<k]` holds a lowercase ASCII letter or a non-ASCII byte (in a word: a
    /// byte of a non-ASCII letter, which has no case here).
    private static func hasLowercase(_ p: UnsafePointer<UInt8>, _ j: Int, _ k: Int) -> Bool {
        for m in j..<k where Bytes.isLower(p[m]) || p[m] >= 0x80 { return true }
        return false
    }

    /// `/Users/alice/` and `/home/alice/` become `/Users/<user>/`: the account name of the
    /// machine that built or ran the app never names a bug.
    mutating func userDirectory(_ j: Int, _ k: Int) -> Int? {
        guard j > line.start, src[j - 1] == UInt8(ascii: "/"), at(k) == UInt8(ascii: "/") else { return nil }
        let len = k - j
        guard (len == 5 && Keywords.equals(src, j, k, "Users")) || (len == 4 && Keywords.equals(src, j, k, "home"))
        else { return nil }
        var m = k + 1
        while m < line.end {
            let b = src[m]
            if b == UInt8(ascii: "/") || Bytes.isSpace(b) || b == UInt8(ascii: "'") || b == UInt8(ascii: "\"") { break }
            m += 1
        }
        guard m > k + 1, at(m) == UInt8(ascii: "/") else { return nil }
        emitRaw(j, k)
        emit("/<user>/")
        clearFlags()
        return m + 1
    }

    /// `ContiguousArrayBuffer.swift:692:` keeps the file and drops `:692` (and a column):
    /// line numbers move with every edit of the file. Every `:digits` group is dropped, and
    /// only when a closing character follows (end of line, white space, `:`, `)`, `]`, `,`,
    /// `;`, `>`, `}`, a quote), so that dropping never joins two tokens.
    func sourceLine(_ j: Int, _ k: Int) -> Int? {
        guard at(k) == UInt8(ascii: ":"), Bytes.isDigit(at(k + 1)), j > line.start, src[j - 1] == UInt8(ascii: "."),
            Keywords.isSourceExtension(src, j, k)
        else { return nil }
        var m = k
        while at(m) == UInt8(ascii: ":") && Bytes.isDigit(at(m + 1)) {
            var c = m + 1
            while Bytes.isDigit(at(c)) { c += 1 }
            guard closesToken(c) else { break }
            m = c
        }
        return m > k ? m : nil
    }

    @inline(__always) func closesToken(_ k: Int) -> Bool {
        if k >= line.end { return true }
        switch src[k] {
        case UInt8(ascii: ":"), UInt8(ascii: ")"), UInt8(ascii: "]"), UInt8(ascii: ","), UInt8(ascii: ";"),
            UInt8(ascii: ">"), UInt8(ascii: "}"), UInt8(ascii: "'"), UInt8(ascii: "\""):
            return true
        default:
            return Bytes.isSpace(src[k])
        }
    }

    /// KVO change dictionaries print the observed values: `new = Bob;`, `old = 3;`.
    /// Those values are the data, not the bug: they become `<v>`.
    mutating func changeValue(_ j: Int, _ k: Int) -> Int? {
        guard k - j == 3, Keywords.equals(src, j, k, "new") || Keywords.equals(src, j, k, "old"), isSpaceAt(k)
        else { return nil }
        var m = skipSpaces(k)
        guard at(m) == UInt8(ascii: "="), isSpaceAt(m + 1) else { return nil }
        m = skipSpaces(m + 1)
        while m < line.end && src[m] != UInt8(ascii: ";") { m += 1 }
        out.append(" = ")
        emit("<v>")
        clearFlags()
        return m
    }
}
