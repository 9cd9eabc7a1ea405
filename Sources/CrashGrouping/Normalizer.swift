/// The v1 normalizer: one forward pass over the UTF-8 bytes of a reason or a frame,
/// writing the normalized text into a byte buffer. The rules are documented in
/// `docs/grouping.md`; each matcher below names the rule it implements.
///
/// Every look-ahead is either bounded (dates, UUIDs, IPv4) or memoized (e-mail local
/// parts, matching `>`), so the pass is linear in the input whatever it holds.
/// Matchers only ever cut at ASCII bytes, so the output is valid UTF-8.
struct Normalizer {
    let src: UnsafeBufferPointer<UInt8>
    /// `normalize(frame:)`: every line is a frame and numbers are kept.
    let frameMode: Bool
    var out: [UInt8] = []

    // Current line.
    var lineStart = 0
    var e = 0
    var lineOut = 0
    /// Frame rules on this line: drop index, addresses and symbol offsets.
    var frameRules = false
    /// Standalone numbers are kept as sent (frames: they name closures and templates).
    var keepNumbers = false

    // Scanner state.
    var pendingSpace = false
    /// The last word was an error-code keyword (`code`, `errno`, `status`, ...).
    var armed = false
    /// The last word was `line`: its number is a line number even in a frame.
    var lineArmed = false
    /// The last token written was an address placeholder `0x?`.
    var lastWasAddress = false
    /// Where in `out` each `+` of the current chain was written as a plain character (an
    /// offset after it would be dropped: not after an address, not in `(+`).
    var plainPluses: [Int] = []
    /// Inside a URL (after `scheme://`, until white space or a quote).
    var inURL = false
    /// No e-mail address starts before this index (memo of a failed local-part scan).
    var emailFailEnd = 0
    /// Matching `>` for each `<` of the current line, computed on first need.
    var closeTable: [Int32] = []
    var closeTableLine = -1

    init(src: UnsafeBufferPointer<UInt8>, frameMode: Bool) {
        self.src = src
        self.frameMode = frameMode
        out.reserveCapacity(src.count + 16)
    }

    /// Passes before the input counts as one that does not converge.
    static let maximumPasses = 32

    /// What an input that does not converge normalizes to when even its letters are not a
    /// fixed point (a test checks that this text is one).
    static let unnormalizable = "<unnormalizable>"

    static func normalize(_ text: String, frameMode: Bool) -> String {
        if text.isEmpty { return "" }
        var text = text
        var current = text.withUTF8 { pass($0, frameMode: frameMode) }
        // Run to a fixed point: a drop can expose a new match (`++ 1 2`, a URL fragment cut
        // before another one), so one pass is not idempotent for every input. Typical input
        // converges in one pass and pays one more to confirm it.
        for _ in 1..<maximumPasses {
            let next = current.withUnsafeBufferPointer { pass($0, frameMode: frameMode) }
            if next == current { return String(decoding: current, as: UTF8.self) }
            current = next
        }
        // Still changing after 32 passes: fuzzer-made chains that each pass shortens by one
        // link. Grouping such text by its ASCII words (letters, one space between) keeps
        // normalization idempotent and its cost bounded.
        var letters: [UInt8] = []
        for b in current {
            if Bytes.isAlpha(b) {
                letters.append(b)
            } else if !letters.isEmpty && letters.last != Bytes.space {
                letters.append(Bytes.space)
            }
        }
        while letters.last == Bytes.space { letters.removeLast() }
        let fixed = letters.withUnsafeBufferPointer { pass($0, frameMode: frameMode) } == letters
        return fixed ? String(decoding: letters, as: UTF8.self) : unnormalizable
    }

    /// One pass over `buffer`: its normalized bytes.
    static func pass(_ buffer: UnsafeBufferPointer<UInt8>, frameMode: Bool) -> [UInt8] {
        var normalizer = Normalizer(src: buffer, frameMode: frameMode)
        normalizer.run()
        return normalizer.out
    }

    // MARK: - Lines

    mutating func run() {
        let n = src.count
        var i = 0
        var first = true
        while true {
            var end = i
            while end < n {
                let b = src[end]
                if b == Bytes.newline || b == Bytes.carriageReturn { break }
                end += 1
            }
            if !first && !out.isEmpty { out.append(Bytes.newline) }
            first = false
            processLine(start: i, end: end)
            if end >= n { break }
            i = (src[end] == Bytes.carriageReturn && end + 1 < n && src[end + 1] == Bytes.newline) ? end + 2 : end + 1
        }
        while out.last == Bytes.newline { out.removeLast() }
    }

    mutating func processLine(start: Int, end: Int) {
        lineStart = start
        e = end
        var j = skipSpaces(start)
        if !frameMode {
            // Repeated, so that a prefix uncovered by removing one is removed too.
            while true {
                let k = skipSpaces(stripLogPrefix(j))
                if k == j { break }
                j = k
            }
        }
        frameRules = frameMode || looksLikeFrame(j)
        keepNumbers = frameMode
        if frameRules { j = stripFrameIndex(j) }
        pendingSpace = false
        armed = false
        lineArmed = false
        lastWasAddress = false
        inURL = false
        lineOut = out.count
        while j < e { j = step(j) }
    }

    // MARK: - Primitives

    @inline(__always) func at(_ k: Int) -> UInt8 { k < e ? src[k] : 0 }

    @inline(__always) func isSpaceAt(_ k: Int) -> Bool { k < e && Bytes.isSpace(src[k]) }

    @inline(__always) func skipSpaces(_ k: Int) -> Int {
        var k = k
        while k < e && Bytes.isSpace(src[k]) { k += 1 }
        return k
    }

    /// Whether the character starting at `k` belongs to a word.
    @inline(__always) func isWordAt(_ k: Int) -> Bool {
        let b = at(k)
        if b < 0x80 { return Bytes.isASCIIWord(b) }
        return Bytes.isWordScalar(scalar(at: k))
    }

    func scalar(at k: Int) -> UInt32 {
        let b0 = UInt32(at(k))
        switch Bytes.sequenceLength(UInt8(b0)) {
        case 2: return (b0 & 0x1F) << 6 | UInt32(at(k + 1) & 0x3F)
        case 3: return (b0 & 0x0F) << 12 | UInt32(at(k + 1) & 0x3F) << 6 | UInt32(at(k + 2) & 0x3F)
        case 4:
            return (b0 & 0x07) << 18 | UInt32(at(k + 1) & 0x3F) << 12 | UInt32(at(k + 2) & 0x3F) << 6
                | UInt32(at(k + 3) & 0x3F)
        default: return b0
        }
    }

    @inline(__always) mutating func flushSpace() {
        if pendingSpace {
            if out.count > lineOut { out.append(Bytes.space) }
            pendingSpace = false
        }
    }

    @inline(__always) mutating func emitRaw(_ a: Int, _ b: Int) {
        flushSpace()
        out.append(contentsOf: UnsafeBufferPointer(rebasing: src[a..<b]))
    }

    @inline(__always) mutating func emit(_ s: StaticString) {
        flushSpace()
        s.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    mutating func clearFlags() {
        armed = false
        lineArmed = false
        lastWasAddress = false
    }

    /// Writes a placeholder for the token that ends at `end`; a placeholder wrapped in
    /// angle brackets (`<8F0E...>`, `<1>`) is written once (`<uuid>`, `<n>`).
    mutating func placeholder(_ name: StaticString, end: Int) -> Int {
        flushSpace()
        clearFlags()
        if out.count > lineOut && out.last == UInt8(ascii: "<") && at(end) == UInt8(ascii: ">") {
            out.removeLast()
            emit(name)
            return end + 1
        }
        emit(name)
        return end
    }

    // MARK: - Dispatch

    mutating func step(_ j: Int) -> Int {
        let b = src[j]
        if frameRules && out.count == lineOut && !Bytes.isSpace(b) {
            // Nothing written yet on this frame line: an index here (also one uncovered by
            // dropping an address) is still the frame's index.
            let k = stripFrameIndex(j)
            if k != j { return k }
        }
        if Bytes.isSpace(b) {
            pendingSpace = true
            inURL = false
            return j + 1
        }
        if b >= 0x80 {
            if isWordAt(j) { return word(j) }
            let len = Bytes.sequenceLength(b)
            emitRaw(j, min(j + len, e))
            clearFlags()
            return j + len
        }
        if Bytes.isDigit(b) { return number(j) }
        if Bytes.isAlpha(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: "$") { return word(j) }
        return punctuation(j, b)
    }

    mutating func punctuation(_ j: Int, _ b: UInt8) -> Int {
        switch b {
        case UInt8(ascii: "<"):
            if let k = objectDescription(j) { return k }
        case UInt8(ascii: "+") where frameRules:
            if let k = offset(j) { return k }
        case UInt8(ascii: "[") where frameRules, UInt8(ascii: "(") where frameRules:
            if let k = bracketedAddress(j) { return k }
        case UInt8(ascii: "?") where inURL:
            return query(j)
        case UInt8(ascii: "#") where inURL:
            return fragment(j)
        default:
            break
        }
        // `scheme://`: a URL starts (its query values and fragment are dropped).
        if b == UInt8(ascii: ":") && at(j + 1) == UInt8(ascii: "/") && at(j + 2) == UInt8(ascii: "/") && !pendingSpace
            && out.count > lineOut && Bytes.isAlnum(out[out.count - 1])
        {
            flushSpace()
            out.append(b)
            inURL = true
            clearFlags()
            return j + 1
        }
        if b == UInt8(ascii: "+") && frameRules {
            let keepsOffset = offsetIsKept
            if let top = plainPluses.last, top != out.count - 1 || out[top] != UInt8(ascii: "+") {
                plainPluses.removeAll(keepingCapacity: true)  // something else was written since
            }
            flushSpace()
            if !keepsOffset { plainPluses.append(out.count) }
        } else {
            flushSpace()
        }
        out.append(b)
        switch b {
        case UInt8(ascii: "="), UInt8(ascii: ":"), UInt8(ascii: "("), UInt8(ascii: "["), UInt8(ascii: "-"),
            UInt8(ascii: "#"):
            break  // `Code=-1009`, `errno: 2`, `(code=1`, `error [-1200]`: the keyword still applies
        default:
            armed = false
            lineArmed = false
        }
        lastWasAddress = false
        // Placeholders (`<n>`) may sit inside a URL path; only a quote or white space ends it.
        if inURL && (b == UInt8(ascii: "'") || b == UInt8(ascii: "\"")) {
            inURL = false
        }
        return j + 1
    }

    // MARK: - Words

    /// A token that starts with a letter, `_`, `$` or a non-ASCII letter.
    mutating func word(_ j: Int) -> Int {
        let b = src[j]
        if Bytes.isHex(b) {
            if let k = uuid(j) { return placeholder("<uuid>", end: k) }
            if let k = hexDigest(j) { return placeholder("<hex>", end: k) }
        }
        if b < 0x80, let k = email(j) { return placeholder("<email>", end: k) }
        let k = scanWord(j, letterStart: true)
        if let m = userDirectory(j, k) { return m }
        emitRaw(j, k)
        lastWasAddress = false
        if let m = sourceLine(j, k) {
            armed = false
            lineArmed = false
            return m
        }
        if let m = changeValue(j, k) { return m }
        armed = Keywords.isErrorCodeKeyword(src, j, k)
        lineArmed = k - j == 4 && Keywords.equalsLower(src, j, k, "line")
        return k
    }

    /// Scans a word: letters, digits, `_`, `$`, non-ASCII letters, and, in a word that
    /// starts with a letter, the joiners that keep names whole: `.` before a digit
    /// (`libc.so.6`, `python3.11`), `,` between digits (`iPhone14,2`) and `-` before a
    /// digit in a word without lowercase letters (`UTF-8`, `ISO-8859-1`, `SHA-256`).
    func scanWord(_ j: Int, letterStart: Bool) -> Int {
        var k = j
        var hasLower = false
        var lastDigit = false
        while k < e {
            let b = src[k]
            if b < 0x80 {
                if Bytes.isASCIIWord(b) {
                    if Bytes.isLower(b) { hasLower = true }
                    lastDigit = Bytes.isDigit(b)
                    k += 1
                    continue
                }
                if letterStart && Bytes.isDigit(at(k + 1)) {
                    if b == UInt8(ascii: ".") || (b == UInt8(ascii: ",") && lastDigit)
                        || (b == UInt8(ascii: "-") && !hasLower)
                    {
                        k += 1
                        continue
                    }
                }
                break
            }
            if !Bytes.isWordScalar(scalar(at: k)) { break }
            hasLower = true
            lastDigit = false
            k += Bytes.sequenceLength(b)
        }
        return min(k, e)
    }

    /// `/Users/alice/` and `/home/alice/` become `/Users/<user>/`: the account name of the
    /// machine that built or ran the app never names a bug.
    mutating func userDirectory(_ j: Int, _ k: Int) -> Int? {
        guard j > lineStart, src[j - 1] == UInt8(ascii: "/"), at(k) == UInt8(ascii: "/") else { return nil }
        let len = k - j
        guard (len == 5 && Keywords.equals(src, j, k, "Users")) || (len == 4 && Keywords.equals(src, j, k, "home"))
        else { return nil }
        var m = k + 1
        while m < e {
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
        guard at(k) == UInt8(ascii: ":"), Bytes.isDigit(at(k + 1)), j > lineStart, src[j - 1] == UInt8(ascii: "."),
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
        if k >= e { return true }
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
        while m < e && src[m] != UInt8(ascii: ";") { m += 1 }
        out.append(contentsOf: [Bytes.space, UInt8(ascii: "="), Bytes.space])
        emit("<v>")
        clearFlags()
        return m
    }

    // MARK: - Numbers

    /// A token that starts with a digit.
    mutating func number(_ j: Int) -> Int {
        if src[j] == UInt8(ascii: "0") && at(j + 1) | 0x20 == UInt8(ascii: "x") {
            var k = j + 2
            while Bytes.isHex(at(k)) { k += 1 }
            if k > j + 2 {
                if !isWordAt(k) { return address(j, k) }
            } else if at(j + 2) == UInt8(ascii: "?") {
                emitAddressPlaceholder()
                return j + 3
            }
        }
        if let k = uuid(j) { return placeholder("<uuid>", end: k) }
        if let (k, _) = dateTime(j) { return placeholder("<time>", end: k) }
        if let k = timeOfDay(j) { return placeholder("<time>", end: k) }
        if let k = ipv4(j) { return placeholder("<ip>", end: k) }
        if let k = hexDigest(j) { return placeholder("<hex>", end: k) }
        if let k = email(j) { return placeholder("<email>", end: k) }
        var k = j
        while Bytes.isDigit(at(k)) { k += 1 }
        while at(k) == UInt8(ascii: ".") && Bytes.isDigit(at(k + 1)) {
            k += 2
            while Bytes.isDigit(at(k)) { k += 1 }
        }
        let keep = (keepNumbers && !lineArmed) || armed
            || (!pendingSpace && out.count > lineOut && out.last == UInt8(ascii: "#"))
        if isWordAt(k) {
            if let u = Keywords.unitEnd(src, k, e), !isWordAt(u) {
                if keep { emitRaw(j, k) } else { emit("<n>") }
                emitRaw(k, u)
                clearFlags()
                return u
            }
            // Not a number: a token such as `64bit`, `2x`, `3rd` or `1.2.3e4` stays as sent.
            let w = scanWord(k, letterStart: false)
            emitRaw(j, w)
            clearFlags()
            return w
        }
        if keep {
            emitRaw(j, k)
            clearFlags()
            return k
        }
        return placeholder("<n>", end: k)
    }

    /// A hex token `0x...` in `[j, k)`.
    mutating func address(_ j: Int, _ k: Int) -> Int {
        if frameRules {
            // A load address followed by `+ offset` is an unsymbolicated frame: the offset
            // is all that names the function, so it stays and the address becomes `0x?`.
            var m = k
            while isSpaceAt(m) { m += 1 }
            if at(m) == UInt8(ascii: "+") {
                m += 1
                while isSpaceAt(m) { m += 1 }
                if Bytes.isDigit(at(m)) {
                    flushSpace()
                    emit("0x?")
                    armed = false
                    lastWasAddress = true
                    return k
                }
            }
            return k  // dropped
        }
        var zeros = true
        for m in (j + 2)..<k where src[m] != UInt8(ascii: "0") {
            zeros = false
            break
        }
        if zeros {
            // A null pointer is not an address that varies: `address=0x0` stays distinct.
            emit("0x0")
            clearFlags()
            return k
        }
        if Keywords.isNamedCode(src, j, k) {
            emitRaw(j, k)
            clearFlags()
            return k
        }
        emitAddressPlaceholder()
        return k
    }

    /// `0x?`; in a reason, a run of addresses separated by white space (`*** First throw
    /// call stack: (0x1 0x2 ...)`) becomes one `0x?`, as its length varies.
    mutating func emitAddressPlaceholder() {
        if lastWasAddress && !frameRules {
            pendingSpace = false
            return
        }
        emit("0x?")
        armed = false
        lineArmed = false
        lastWasAddress = true
    }

    // MARK: - Fixed shapes

    /// `8-4-4-4-12` hex digits.
    func uuid(_ j: Int) -> Int? {
        guard j + 36 <= e, src[j + 8] == UInt8(ascii: "-") else { return nil }
        for m in j..<(j + 36) {
            let b = src[m]
            switch m - j {
            case 8, 13, 18, 23: if b != UInt8(ascii: "-") { return nil }
            default: if !Bytes.isHex(b) { return nil }
            }
        }
        return isWordAt(j + 36) ? nil : j + 36
    }

    /// A run of at least 16 hex digits of one case, with digits and letters (SHA-1/256, MD5,
    /// build ids).
    func hexDigest(_ j: Int) -> Int? {
        var k = j
        var digits = 0
        var lower = 0
        var upper = 0
        while k < e {
            let b = src[k]
            if Bytes.isDigit(b) {
                digits += 1
            } else if Bytes.isLowerHexLetter(b) {
                lower += 1
            } else if Bytes.isUpperHexLetter(b) {
                upper += 1
            } else {
                break
            }
            k += 1
        }
        guard k - j >= 16, digits > 0, (lower > 0) != (upper > 0), !isWordAt(k) else { return nil }
        return k
    }

    /// `d{1,2}:dd` with optional `:dd` and fraction; nil when seconds are required and absent.
    func clock(_ j: Int, requireSeconds: Bool) -> Int? {
        var k = j
        guard Bytes.isDigit(at(k)) else { return nil }
        k += 1
        if Bytes.isDigit(at(k)) { k += 1 }
        guard at(k) == UInt8(ascii: ":"), Bytes.isDigit(at(k + 1)), Bytes.isDigit(at(k + 2)) else { return nil }
        k += 3
        if at(k) == UInt8(ascii: ":") && Bytes.isDigit(at(k + 1)) && Bytes.isDigit(at(k + 2)) {
            k += 3
            if (at(k) == UInt8(ascii: ".") || at(k) == UInt8(ascii: ",")) && Bytes.isDigit(at(k + 1)) {
                k += 1
                while Bytes.isDigit(at(k)) { k += 1 }
            }
        } else if requireSeconds {
            return nil
        }
        return k
    }

    /// `Z`, `+08`, `+0800`, `+08:00`; with `spaced`, also ` +0000` (NSDate's description).
    func timeZone(_ j: Int, spaced: Bool) -> Int {
        let b = at(j)
        if b == UInt8(ascii: "Z") || b == UInt8(ascii: "z") { return j + 1 }
        if b == UInt8(ascii: "+") || b == UInt8(ascii: "-") {
            guard Bytes.isDigit(at(j + 1)), Bytes.isDigit(at(j + 2)) else { return j }
            var k = j + 3
            if at(k) == UInt8(ascii: ":") && Bytes.isDigit(at(k + 1)) && Bytes.isDigit(at(k + 2)) {
                k += 3
            } else if Bytes.isDigit(at(k)) && Bytes.isDigit(at(k + 1)) {
                k += 2
            }
            return Bytes.isDigit(at(k)) ? j : k
        }
        if spaced && isSpaceAt(j) {
            let s = skipSpaces(j)
            guard at(s) == UInt8(ascii: "+") || at(s) == UInt8(ascii: "-") else { return j }
            for m in (s + 1)..<(s + 5) where !Bytes.isDigit(at(m)) { return j }
            return isWordAt(s + 5) ? j : s + 5
        }
        return j
    }

    /// `YYYY-MM-DD`, optionally followed by `T` or a space and a time and zone.
    func dateTime(_ j: Int) -> (Int, Bool)? {
        guard at(j + 4) == UInt8(ascii: "-"), at(j + 7) == UInt8(ascii: "-") else { return nil }
        for m in [j, j + 1, j + 2, j + 3, j + 5, j + 6, j + 8, j + 9] where !Bytes.isDigit(at(m)) { return nil }
        var k = j + 10
        var hasTime = false
        let s = at(k)
        let spaced = isSpaceAt(k)
        if s == UInt8(ascii: "T") || s == UInt8(ascii: "t") || spaced,
            let t = clock(spaced ? skipSpaces(k) : k + 1, requireSeconds: spaced)
        {
            k = timeZone(t, spaced: true)
            hasTime = true
        }
        return isWordAt(k) ? nil : (k, hasTime)
    }

    /// `HH:MM:SS` with optional fraction and zone.
    func timeOfDay(_ j: Int) -> Int? {
        guard at(j + 1) == UInt8(ascii: ":") || at(j + 2) == UInt8(ascii: ":"),
            let t = clock(j, requireSeconds: true)
        else { return nil }
        let k = timeZone(t, spaced: false)
        return isWordAt(k) ? nil : k
    }

    /// Four dot-separated groups of 1 to 3 digits, not followed by another `.digit`.
    func ipv4(_ j: Int) -> Int? {
        var k = j
        for part in 0..<4 {
            let s = k
            while Bytes.isDigit(at(k)) && k - s < 4 { k += 1 }
            guard k - s >= 1 && k - s <= 3 else { return nil }
            if part < 3 {
                guard at(k) == UInt8(ascii: ".") else { return nil }
                k += 1
            }
        }
        if isWordAt(k) || (at(k) == UInt8(ascii: ".") && Bytes.isDigit(at(k + 1))) { return nil }
        return k
    }

    /// `local@domain.tld`; `icon@2x.png` (an asset scale) is not an e-mail.
    mutating func email(_ j: Int) -> Int? {
        guard j >= emailFailEnd else { return nil }
        var k = j
        while k < e {
            let b = src[k]
            if Bytes.isAlnum(b) || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "%")
                || b == UInt8(ascii: "+") || b == UInt8(ascii: "-")
            {
                k += 1
            } else {
                break
            }
        }
        // Every start in (j, k] reaches the same `@` and the same domain: remember a failure.
        let fail = k + 1
        guard at(k) == UInt8(ascii: "@"), k > j else {
            emailFailEnd = fail
            return nil
        }
        var m = k + 1
        var labels = 0
        var lastAlpha = false
        var lastLength = 0
        var firstIsScale = false
        while true {
            let s = m
            var allAlpha = true
            var digitsThenX = true
            while Bytes.isAlnum(at(m)) || at(m) == UInt8(ascii: "-") {
                if !Bytes.isAlpha(at(m)) { allAlpha = false }
                if !(Bytes.isDigit(at(m)) || (at(m) == UInt8(ascii: "x") && m > s && at(m + 1) == UInt8(ascii: "."))) {
                    digitsThenX = false
                }
                m += 1
            }
            guard m > s else { break }
            if labels == 0 { firstIsScale = digitsThenX }
            labels += 1
            lastAlpha = allAlpha
            lastLength = m - s
            if at(m) == UInt8(ascii: ".") && Bytes.isAlnum(at(m + 1)) {
                m += 1
                continue
            }
            break
        }
        guard labels >= 2, lastAlpha, lastLength >= 2, !firstIsScale, !isWordAt(m) else {
            emailFailEnd = fail
            return nil
        }
        return m
    }

    // MARK: - Object descriptions

    /// `<Student 0x6180000163c0>`, `<Student: 0x...>` and `<UIView: 0x...; frame = ...>`
    /// become `<Student>` / `<UIView>`. A description that goes on with other text after the
    /// address (`<NSLayoutConstraint:0x... UILabel.leading == ...>`, KVO observances) keeps
    /// that text, which names the bug; only its addresses become `0x?`.
    mutating func objectDescription(_ j: Int) -> Int? {
        var k = j + 1
        let c = at(k)
        guard Bytes.isAlpha(c) || c == UInt8(ascii: "_") else { return nil }
        while true {
            let b = at(k)
            if Bytes.isASCIIWord(b) || b == UInt8(ascii: ".") { k += 1 } else { break }
        }
        let nameEnd = k
        var separated = false
        if at(k) == UInt8(ascii: ":") {
            k += 1
            separated = true
        }
        while isSpaceAt(k) {
            k += 1
            separated = true
        }
        guard separated, at(k) == UInt8(ascii: "0"), at(k + 1) | 0x20 == UInt8(ascii: "x"), Bytes.isHex(at(k + 2))
        else { return nil }
        var a = k + 2
        while Bytes.isHex(at(a)) { a += 1 }
        if isWordAt(a) { return nil }
        var end: Int
        if at(a) == UInt8(ascii: ">") {
            end = a + 1
        } else if at(a) == UInt8(ascii: ";"), let close = matchingClose(j) {
            end = close + 1
        } else {
            return nil
        }
        flushSpace()
        out.append(UInt8(ascii: "<"))
        out.append(contentsOf: UnsafeBufferPointer(rebasing: src[(j + 1)..<nameEnd]))
        out.append(UInt8(ascii: ">"))
        clearFlags()
        return end
    }

    /// The `>` that closes the `<` at `j` on this line, nesting respected.
    mutating func matchingClose(_ j: Int) -> Int? {
        if closeTableLine != lineStart {
            closeTableLine = lineStart
            closeTable = [Int32](repeating: -1, count: e - lineStart)
            var stack: [Int32] = []
            for m in lineStart..<e {
                if src[m] == UInt8(ascii: "<") {
                    stack.append(Int32(m - lineStart))
                } else if src[m] == UInt8(ascii: ">"), let open = stack.popLast() {
                    closeTable[Int(open)] = Int32(m - lineStart)
                }
            }
        }
        let close = closeTable[j - lineStart]
        return close < 0 ? nil : Int(close) + lineStart
    }

    // MARK: - URLs

    @inline(__always) func endsURL(_ b: UInt8) -> Bool {
        Bytes.isSpace(b) || b == UInt8(ascii: "'") || b == UInt8(ascii: "\"") || b == UInt8(ascii: "<")
            || b == UInt8(ascii: ">") || b == UInt8(ascii: ",") || b == UInt8(ascii: ")") || b == UInt8(ascii: "]")
            || b == UInt8(ascii: "}")
    }

    /// A URL's query keeps its keys and drops its values: `?page=2&token=abc` -> `?page=&token=`.
    mutating func query(_ j: Int) -> Int {
        flushSpace()
        out.append(UInt8(ascii: "?"))
        var k = j + 1
        while k < e && !endsURL(src[k]) {
            if src[k] == UInt8(ascii: "#") {
                while k < e && !endsURL(src[k]) { k += 1 }
                break
            }
            let s = k
            while k < e {
                let b = src[k]
                if endsURL(b) || b == UInt8(ascii: "=") || b == UInt8(ascii: "&") || b == UInt8(ascii: "#") { break }
                k += 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: src[s..<k]))
            if at(k) == UInt8(ascii: "=") {
                out.append(UInt8(ascii: "="))
                k += 1
                while k < e {
                    let b = src[k]
                    if endsURL(b) || b == UInt8(ascii: "&") || b == UInt8(ascii: "#") { break }
                    k += 1
                }
            }
            if at(k) == UInt8(ascii: "&") {
                out.append(UInt8(ascii: "&"))
                k += 1
            }
        }
        inURL = false
        clearFlags()
        return k
    }

    /// A URL's `#fragment` is dropped.
    mutating func fragment(_ j: Int) -> Int {
        var k = j
        while k < e && !endsURL(src[k]) { k += 1 }
        inURL = false
        return k
    }

    // MARK: - Log prefixes

    /// `2018-03-18 14:43:32.340558+0800 Demo[2900:449839] ` at the start of a line is removed:
    /// a date-time with seconds, optionally followed by `Process[pid(:tid)]`; or a bare
    /// `Process[pid:tid] `.
    mutating func stripLogPrefix(_ j: Int) -> Int {
        if let (t, hasTime) = dateTime(j), hasTime {
            var k = skipSpaces(t)
            if let p = processTag(k, requireThread: false) { k = p }
            return k
        }
        if let p = processTag(j, requireThread: true) { return p }
        return j
    }

    func processTag(_ j: Int, requireThread: Bool) -> Int? {
        var m = j
        while m < e {
            let b = src[m]
            if Bytes.isSpace(b) || b == UInt8(ascii: "[") { break }
            m += 1
        }
        guard m > j, at(m) == UInt8(ascii: "[") else { return nil }
        // Without a date before it, the tag must look like one: a name, a pid and a thread
        // id of at least two characters each (`array[3:5] out of range` is not a prefix).
        let least = requireThread ? 2 : 1
        if requireThread && !Bytes.isAlpha(src[j]) { return nil }
        m += 1
        let pid = m
        while Bytes.isDigit(at(m)) { m += 1 }
        guard m - pid >= least else { return nil }
        if at(m) == UInt8(ascii: ":") {
            m += 1
            let tid = m
            while Bytes.isAlnum(at(m)) { m += 1 }
            guard m - tid >= least else { return nil }
        } else if requireThread {
            return nil
        }
        guard at(m) == UInt8(ascii: "]") else { return nil }
        m += 1
        if at(m) == UInt8(ascii: ":") { m += 1 }
        guard m >= e || Bytes.isSpace(src[m]) else { return nil }
        return m
    }

    // MARK: - Frames

    /// A reason line that is a stack frame gets the frame rules: Darwin and Swift
    /// backtracer frames (`3  Demo  0x0000000100a1b2c3 -[A b] + 44`: an index and a long
    /// address), LLDB frames (`frame #0: 0x...`), and glibc's `path(symbol+0x12)[0x...]`.
    func looksLikeFrame(_ j: Int) -> Bool {
        var k = j
        if startsWith(k, "frame #") {
            return hasLongAddress(k)
        }
        if Bytes.isDigit(at(k)) {
            while Bytes.isDigit(at(k)) { k += 1 }
            guard isSpaceAt(k) else { return false }
            return hasLongAddress(k)
        }
        // glibc backtrace_symbols: ends with `)[0x...]`.
        var m = e
        while m > j && Bytes.isSpace(src[m - 1]) { m -= 1 }
        guard m - j >= 6, src[m - 1] == UInt8(ascii: "]") else { return false }
        var h = m - 2
        while h > j && Bytes.isHex(src[h]) { h -= 1 }
        return h >= j + 3 && h < m - 2 && src[h] == UInt8(ascii: "x") && src[h - 1] == UInt8(ascii: "0")
            && src[h - 2] == UInt8(ascii: "[") && src[h - 3] == UInt8(ascii: ")")
    }

    func startsWith(_ k: Int, _ s: StaticString) -> Bool {
        let n = s.utf8CodeUnitCount
        guard k + n <= e else { return false }
        let p = s.utf8Start
        for m in 0..<n where src[k + m] != p[m] { return false }
        return true
    }

    /// A standalone `0x` with at least 8 hex digits.
    func hasLongAddress(_ j: Int) -> Bool {
        var k = j
        while k + 10 <= e {
            if src[k] == UInt8(ascii: "0") && src[k + 1] | 0x20 == UInt8(ascii: "x") && k > lineStart
                && Bytes.isSpace(src[k - 1])
            {
                var m = k + 2
                while Bytes.isHex(at(m)) { m += 1 }
                if m - k - 2 >= 8 && !isWordAt(m) { return true }
                k = m
            } else {
                k += 1
            }
        }
        return false
    }

    /// Drops a frame's leading index: `3 `, `#3 `, `* frame #3: `, and the backtracer's `[ra]`.
    func stripFrameIndex(_ j: Int) -> Int {
        var k = j
        while true {
            let next = stripOneFrameIndex(k)
            if next == k { return k }
            k = next
        }
    }

    func stripOneFrameIndex(_ j: Int) -> Int {
        var k = j
        if at(k) == UInt8(ascii: "*") && isSpaceAt(k + 1) { k = skipSpaces(k + 1) }  // LLDB's current frame
        if startsWith(k, "frame #") && Bytes.isDigit(at(k + 7)) {
            var m = k + 7
            while Bytes.isDigit(at(m)) { m += 1 }
            if at(m) == UInt8(ascii: ":") { m += 1 }
            if !isWordAt(m) { k = m }
        } else if at(k) == UInt8(ascii: "#") && Bytes.isDigit(at(k + 1)) {
            var m = k + 1
            while Bytes.isDigit(at(m)) { m += 1 }
            if at(m) == UInt8(ascii: ":") { m += 1 }
            if m >= e || isSpaceAt(m) { k = m }
        } else if Bytes.isDigit(at(k)) {
            var m = k
            while Bytes.isDigit(at(m)) { m += 1 }
            if isSpaceAt(m) { k = m }
        }
        k = skipSpaces(k)
        if startsWith(k, "[ra]") { k = skipSpaces(k + 4) }
        return k
    }

    /// `+ 44`, `+0x12f`: a symbol's offset is dropped (it moves with every build). It stays
    /// after a load address (`0x? + 12345`, an unsymbolicated frame) and inside `(+0x3143)`
    /// (glibc's frame without a symbol).
    mutating func offset(_ j: Int) -> Int? {
        guard let operand = offsetOperand(j + 1) else { return nil }
        guard offsetIsKept else {
            // `++ 1 2`, `+ + 1 2`: dropping `+ 1` leaves `+` before ` 2`, an offset the next
            // pass would drop. Drop it now, and so on down a chain of plain `+`, so that one
            // pass is enough.
            var end = operand.end
            while let top = plainPluses.last, top == out.count - 1, out[top] == UInt8(ascii: "+"),
                let next = offsetOperand(end)
            {
                plainPluses.removeLast()
                out.removeLast()
                pendingSpace = out.count > lineOut && out.last == Bytes.space
                if pendingSpace { out.removeLast() }
                end = next.end
            }
            return end
        }
        flushSpace()
        out.append(UInt8(ascii: "+"))
        if operand.hadSpace { out.append(Bytes.space) }
        if keepNumbers {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: src[operand.numberStart..<operand.end]))
        } else {
            emit(operand.hex ? "0x?" : "<n>")
        }
        clearFlags()
        return operand.end
    }

    /// Whether a `+ offset` written now stays: after a load address (`0x? + 12345`) or
    /// right inside `(` (`(+0x3143)`).
    var offsetIsKept: Bool {
        lastWasAddress || (!pendingSpace && out.count > lineOut && out.last == UInt8(ascii: "("))
    }

    /// What follows a `+` that makes it an offset: optional spaces, then a decimal or `0x`
    /// hex number that does not run into a word.
    func offsetOperand(_ start: Int) -> (end: Int, numberStart: Int, hex: Bool, hadSpace: Bool)? {
        let numberStart = skipSpaces(start)
        var k = numberStart
        var hex = false
        if at(k) == UInt8(ascii: "0") && at(k + 1) | 0x20 == UInt8(ascii: "x") && Bytes.isHex(at(k + 2)) {
            k += 2
            while Bytes.isHex(at(k)) { k += 1 }
            hex = true
        } else if Bytes.isDigit(at(k)) {
            while Bytes.isDigit(at(k)) { k += 1 }
        } else {
            return nil
        }
        if isWordAt(k) { return nil }
        return (k, numberStart, hex, numberStart > start)
    }

    /// `[0x7f...]` and `(0x...)` in a frame: a bracketed address is dropped whole.
    mutating func bracketedAddress(_ j: Int) -> Int? {
        let close = src[j] == UInt8(ascii: "[") ? UInt8(ascii: "]") : UInt8(ascii: ")")
        var k = j + 1
        guard at(k) == UInt8(ascii: "0"), at(k + 1) | 0x20 == UInt8(ascii: "x"), Bytes.isHex(at(k + 2)) else { return nil }
        k += 2
        while Bytes.isHex(at(k)) { k += 1 }
        guard at(k) == close else { return nil }
        return k + 1
    }
}
