/// The normalizer: one forward pass over the UTF-8 bytes of a reason or a frame, writing
/// the normalized text into a byte buffer. The rules are documented in `docs/grouping.md`;
/// each matcher names the rule it implements. The matchers live in one file per feature:
/// `Normalizer+Words`, `+Numbers`, `+Shapes` (UUIDs, dates, IPv4, e-mail), `+ObjectDescriptions`,
/// `+URLs`, `+LogPrefix` and `+Frames`.
///
/// Every look-ahead is either bounded (dates, UUIDs, IPv4) or memoized (e-mail local
/// parts, matching `>`), so the pass is linear in the input whatever it holds.
/// Matchers only ever cut at ASCII bytes, so the output is valid UTF-8.
struct Normalizer {
    let src: UnsafeBufferPointer<UInt8>
    /// `normalize(frame:)`: every line is a frame and numbers are kept.
    let frameMode: Bool
    /// The rules of the grouping version being applied (v2 adds to v1's).
    let rules: NormalizerRules
    var out: OutputBuffer

    /// What the scanner knows about the current line. Every line starts from a fresh one
    /// (`processLine`), so no flag leaks from one line into the next.
    struct LineState {
        /// The line is `src[start..<end]`.
        var start = 0
        var end = 0
        /// Where the line's output starts in `out`.
        var outStart = 0
        /// Frame rules on this line: drop index, addresses and symbol offsets.
        var frameRules = false
        /// Standalone numbers are kept as sent (frames: they name closures and templates).
        var keepNumbers = false
        /// White space was read and is written before the next token (never at the start).
        var pendingSpace = false
        /// The last word was an error-code keyword (`code`, `errno`, `status`, ...).
        var armed = false
        /// The last word was `line`: its number is a line number even in a frame.
        var lineArmed = false
        /// The last token written was an address placeholder `0x?`.
        var lastWasAddress = false
        /// Inside a URL (after `scheme://`, until white space or a quote).
        var inURL = false
        /// The line holds an `@`: without one, no e-mail address can start on it.
        var hasAt = false
    }

    var line = LineState()
    /// Where in `out` each `+` of the current chain was written as a plain character (an
    /// offset after it would be dropped: not after an address, not in `(+`). Per line.
    var plainPluses: [Int] = []

    // Memos of the whole pass.
    /// No e-mail address starts before this index (memo of a failed local-part scan).
    var emailFailEnd = 0
    /// Matching `>` for each `<` of the current line, computed on first need.
    var closeTable: [Int32] = []
    var closeTableLine = -1

    init(src: UnsafeBufferPointer<UInt8>, frameMode: Bool, rules: NormalizerRules, out: OutputBuffer) {
        self.src = src
        self.frameMode = frameMode
        self.rules = rules
        self.out = out
    }

    /// Bytes of each of the two stack buffers of ``withNormalizedBytes(_:frameMode:rules:_:)``
    /// (1 KiB in all: the stack allocation needs no run-time check).
    static let scratchCapacity = 512

    /// Passes before the input counts as one that does not converge.
    static let maximumPasses = 32

    /// What an input that does not converge normalizes to when even its letters are not a
    /// fixed point (a test checks that this text is one).
    static let unnormalizable = "<unnormalizable>"

    static func normalize(_ text: String, frameMode: Bool, rules: NormalizerRules) -> String {
        if text.isEmpty { return "" }
        return Bytes.withUTF8(text) { src in
            withNormalizedBytes(src, frameMode: frameMode, rules: rules) { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Calls `body` with the normalized bytes of `src`, valid only inside `body`: the
    /// signature hashes them from there, without making a `String` or an array. The passes
    /// write into two scratch buffers on the stack, or on the heap for a long text (a
    /// buffer a pass outgrows moves to the heap: placeholders can be longer than what they
    /// replace, `1` -> `<n>`).
    static func withNormalizedBytes<R>(
        _ src: UnsafeBufferPointer<UInt8>, frameMode: Bool, rules: NormalizerRules, _ body: (UnsafeBufferPointer<UInt8>) -> R
    ) -> R {
        if src.isEmpty { return body(UnsafeBufferPointer(start: nil, count: 0)) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * scratchCapacity) { scratch in
            let capacity = src.count + 64
            let onStack = capacity <= scratchCapacity
            var current =
                onStack
                ? OutputBuffer(borrowing: UnsafeMutableBufferPointer(rebasing: scratch[..<scratchCapacity]))
                : OutputBuffer(capacity: capacity)
            var next =
                onStack
                ? OutputBuffer(borrowing: UnsafeMutableBufferPointer(rebasing: scratch[scratchCapacity...]))
                : OutputBuffer(capacity: capacity)
            defer {
                current.release()
                next.release()
            }
            pass(src, frameMode: frameMode, rules: rules, into: &current)
            // Typical input converges in one pass: text the pass provably writes back as it is
            // needs no second pass to confirm it (debug builds confirm it anyway: every text
            // the tests normalize checks the proof). A text proved before is found in the
            // memo instead.
            if FixedPointMemo.isFixedPoint(current.bytes, frameMode: frameMode) {
                assert(confirmsFixedPoint(current, frameMode: frameMode, rules: rules), "not a fixed point: \(Array(current.bytes))")
                return body(current.bytes)
            }
            // Run to a fixed point: a drop can expose a new match (`++ 1 2`, a URL fragment cut
            // before another one), so one pass is not idempotent for every input.
            for _ in 1..<maximumPasses {
                next.removeAll()
                pass(current.bytes, frameMode: frameMode, rules: rules, into: &next)
                if next.holdsSameBytes(as: current) { return body(current.bytes) }
                swap(&current, &next)
            }
            // Still changing after 32 passes: fuzzer-made chains that each pass shortens by one
            // link. Grouping such text by its ASCII words (letters, one space between) keeps
            // normalization idempotent and its cost bounded.
            var letters: [UInt8] = []
            for b in current.bytes {
                if Bytes.isAlpha(b) {
                    letters.append(b)
                } else if !letters.isEmpty && letters.last != Bytes.space {
                    letters.append(Bytes.space)
                }
            }
            while letters.last == Bytes.space { letters.removeLast() }
            next.removeAll()
            letters.withUnsafeBufferPointer { pass($0, frameMode: frameMode, rules: rules, into: &next) }
            let fixed = next.bytes.elementsEqual(letters)
            return (fixed ? letters : Array(unnormalizable.utf8)).withUnsafeBufferPointer(body)
        }
    }

    /// Whether a pass over `text` writes it back unchanged (the debug check of
    /// ``isFixedPoint(_:frameMode:)``).
    static func confirmsFixedPoint(_ text: OutputBuffer, frameMode: Bool, rules: NormalizerRules) -> Bool {
        var again = OutputBuffer(capacity: text.count + 64)
        defer { again.release() }
        pass(text.bytes, frameMode: frameMode, rules: rules, into: &again)
        return again.holdsSameBytes(as: text)
    }

    /// One pass over `buffer`: its normalized bytes are appended to `out`.
    static func pass(_ buffer: UnsafeBufferPointer<UInt8>, frameMode: Bool, rules: NormalizerRules, into out: inout OutputBuffer) {
        guard !buffer.isEmpty else { return }
        var normalizer = Normalizer(src: buffer, frameMode: frameMode, rules: rules, out: out)
        normalizer.run()
        out = normalizer.out
    }

    // MARK: - Lines

    mutating func run() {
        let n = src.count
        let p = src.baseAddress!
        var i = 0
        var first = true
        while true {
            let (end, hasAt) = Bytes.lineEnd(p, from: i, to: n)
            if !first && !out.isEmpty { out.append(Bytes.newline) }
            first = false
            processLine(start: i, end: end, hasAt: hasAt)
            if end >= n { break }
            i = (p[end] == Bytes.carriageReturn && end + 1 < n && p[end + 1] == Bytes.newline) ? end + 2 : end + 1
        }
        while out.last == Bytes.newline { out.removeLast() }
    }

    mutating func processLine(start: Int, end: Int, hasAt: Bool) {
        line = LineState(start: start, end: end, outStart: out.count)
        line.hasAt = hasAt
        if !plainPluses.isEmpty { plainPluses.removeAll(keepingCapacity: true) }
        var j = skipSpaces(start)
        if !frameMode {
            // Repeated, so that a prefix uncovered by removing one is removed too.
            while true {
                let k = skipSpaces(stripLogPrefix(j))
                if k == j { break }
                j = k
            }
        }
        line.frameRules = frameMode || looksLikeFrame(j)
        line.keepNumbers = frameMode
        if line.frameRules { j = stripFrameIndex(j) }
        while j < end {
            if Bytes.isSpace(src[j]) {
                // A run of white space is one pending space (`step` would read it byte by byte
                // to the same effect: the frame-index check there skips white space).
                line.pendingSpace = true
                line.inURL = false
                j = Bytes.skipSpaces(src.baseAddress!, j + 1, end)
                continue
            }
            j = step(j)
        }
    }

    // MARK: - Primitives

    @inline(__always) func at(_ k: Int) -> UInt8 { k < line.end ? src[k] : 0 }

    @inline(__always) func isSpaceAt(_ k: Int) -> Bool { k < line.end && Bytes.isSpace(src[k]) }

    @inline(__always) func skipSpaces(_ k: Int) -> Int { Bytes.skipSpaces(src.baseAddress!, k, line.end) }

    /// Whether the character starting at `k` belongs to a word.
    @inline(__always) func isWordAt(_ k: Int) -> Bool {
        let b = at(k)
        if b < 0x80 { return Bytes.isASCIIWord(b) }
        return Bytes.isWordScalar(scalar(at: k))
    }

    func scalar(at k: Int) -> UInt32 { Bytes.scalar(src, at: k, end: line.end) }

    @inline(__always) mutating func flushSpace() {
        if line.pendingSpace {
            if out.count > line.outStart { out.append(Bytes.space) }
            line.pendingSpace = false
        }
    }

    @inline(__always) mutating func emitRaw(_ a: Int, _ b: Int) {
        flushSpace()
        out.append(src.baseAddress! + a, count: b - a)
    }

    @inline(__always) mutating func emit(_ s: StaticString) {
        flushSpace()
        out.append(s)
    }

    mutating func clearFlags() {
        line.armed = false
        line.lineArmed = false
        line.lastWasAddress = false
    }

    /// Writes a placeholder for the token that ends at `end`; a placeholder wrapped in
    /// angle brackets (`<8F0E...>`, `<1>`) is written once (`<uuid>`, `<n>`).
    mutating func placeholder(_ name: StaticString, end: Int) -> Int {
        flushSpace()
        clearFlags()
        if out.count > line.outStart && out.last == UInt8(ascii: "<") && at(end) == UInt8(ascii: ">") {
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
        if line.frameRules && out.count == line.outStart && !Bytes.isSpace(b) {
            // Nothing written yet on this frame line: an index here (also one uncovered by
            // dropping an address) is still the frame's index.
            let k = stripFrameIndex(j)
            if k != j { return k }
        }
        if Bytes.isSpace(b) {
            line.pendingSpace = true
            line.inURL = false
            return j + 1
        }
        if b >= 0x80 {
            if isWordAt(j) { return word(j) }
            let len = Bytes.sequenceLength(b)
            emitRaw(j, min(j + len, line.end))
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
        case UInt8(ascii: "+") where line.frameRules:
            if let k = offset(j) { return k }
        case UInt8(ascii: "[") where line.frameRules, UInt8(ascii: "(") where line.frameRules:
            if let k = bracketedAddress(j) { return k }
        case UInt8(ascii: "?") where line.inURL:
            return query(j)
        case UInt8(ascii: "#") where line.inURL:
            return fragment(j)
        default:
            break
        }
        // `scheme://`: a URL starts (its query values and fragment are dropped).
        if b == UInt8(ascii: ":") && at(j + 1) == UInt8(ascii: "/") && at(j + 2) == UInt8(ascii: "/") && !line.pendingSpace
            && out.count > line.outStart && Bytes.isAlnum(out[out.count - 1])
        {
            flushSpace()
            out.append(b)
            line.inURL = true
            clearFlags()
            return j + 1
        }
        if b == UInt8(ascii: "+") && line.frameRules {
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
            line.armed = false
            line.lineArmed = false
        }
        line.lastWasAddress = false
        // Placeholders (`<n>`) may sit inside a URL path; only a quote or white space ends it.
        if line.inURL && (b == UInt8(ascii: "'") || b == UInt8(ascii: "\"")) {
            line.inURL = false
        }
        return j + 1
    }
}
