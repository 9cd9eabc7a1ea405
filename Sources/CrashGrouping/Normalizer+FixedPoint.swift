// The fixed-point shortcut: text that one pass provably writes back unchanged.

extension Normalizer {
    /// Whether one pass over `text` (with the frame rules when `frameMode`) provably writes
    /// `text` back byte for byte. Then `text` is a fixed point and the confirmation pass of
    /// ``withNormalizedBytes(_:frameMode:rules:_:)`` is not needed: that pass costs as much
    /// as the first, and nearly every pass output is a fixed point.
    ///
    /// Conservative: `false` means "not proven" (the confirmation pass decides), never
    /// "changes". It reads `text` as the pass would, token by token, and accepts only tokens
    /// the pass copies as they are, in contexts where no rule fires; each test below names the
    /// rule it rules out, and `docs/grouping.md` ("Speed") gives the argument in full. Text
    /// with anything else (a control character, non-ASCII, `@`, an address, a number the
    /// pass would replace, ...) is left to the confirmation pass. Debug builds check every
    /// accepted text against a real pass (``withNormalizedBytes(_:frameMode:rules:_:)``).
    ///
    /// Independent of the version's rules: v2's additions (`0x0`, a number's sign) only act
    /// on addresses and on numbers that become `<n>`, which it never accepts.
    static func isFixedPoint(_ text: UnsafeBufferPointer<UInt8>, frameMode: Bool) -> Bool {
        let n = text.count
        guard n > 0, let p = text.baseAddress else { return true }
        // The pass drops leading and trailing line breaks (empty lines inside are kept).
        if p[0] == Bytes.newline || p[n - 1] == Bytes.newline { return false }
        var s = 0
        while s < n {
            let (e, hasAt) = Bytes.lineEnd(p, from: s, to: n)
            if e < n && p[e] != Bytes.newline { return false }  // `\r`: a line break the pass rewrites
            if e > s && !lineIsFixedPoint(text, s, e, frameMode: frameMode, hasAt: hasAt) { return false }
            s = e + 1
        }
        return true
    }

    /// One line `text[s..<e]` (not empty) of ``isFixedPoint(_:frameMode:)``.
    private static func lineIsFixedPoint(
        _ text: UnsafeBufferPointer<UInt8>, _ s: Int, _ e: Int, frameMode: Bool, hasAt: Bool
    )
        -> Bool
    {
        // E-mail addresses need an `@` (and a line without one never tries them); the pass
        // trims each line and writes white space as one space.
        if hasAt || text[s] == Bytes.space || text[e - 1] == Bytes.space { return false }
        @inline(__always) func at(_ k: Int) -> UInt8 { k < e ? text[k] : 0 }
        let first = text[s]
        let startsWithFrame = e - s >= 7 && Keywords.equals(text, s, s + 7, "frame #")
        if frameMode {
            // The frame's index: `3 `, `#3 `, `* frame #3: `, `[ra]`.
            if Bytes.isDigit(first) || first == UInt8(ascii: "#") || first == UInt8(ascii: "*") || first == UInt8(ascii: "[")
                || startsWithFrame
            {
                return false
            }
        } else {
            // Log prefixes start with a date (a digit) or hold `[digits` in their first word;
            // a reason line is read as a frame when it starts with an index (a digit) or
            // `frame #`, or ends like glibc's frames, `)[0x1f]`.
            if Bytes.isDigit(first) || startsWithFrame { return false }
            var k = s
            while k < e && text[k] != Bytes.space {
                if text[k] == UInt8(ascii: "[") && Bytes.isDigit(at(k + 1)) { return false }
                k += 1
            }
            if e - s >= 6 && text[e - 1] == UInt8(ascii: "]") {
                var h = e - 2
                while h > s && Bytes.isHex(text[h]) { h -= 1 }
                if h >= s + 3 && h < e - 2 && text[h] == UInt8(ascii: "x") && text[h - 1] == UInt8(ascii: "0")
                    && text[h - 2] == UInt8(ascii: "[") && text[h - 3] == UInt8(ascii: ")")
                {
                    return false
                }
            }
        }
        // The pass's flags (`LineState`), as it would set them on this line.
        var armed = false
        var lineArmed = false
        var lastWasAddress = false
        var inURL = false
        var j = s
        while j < e {
            let b = text[j]
            if b == Bytes.space {
                if text[j + 1] == Bytes.space { return false }  // a run becomes one space
                inURL = false
                j += 1
                continue
            }
            // Control characters are white space, DEL too; non-ASCII is left to the pass.
            if b < 0x21 || b >= 0x7F { return false }
            if Bytes.isDigit(b) {
                if b == UInt8(ascii: "0") && at(j + 1) | 0x20 == UInt8(ascii: "x") {
                    let c = at(j + 2)
                    // An address (every rule that drops one starts it at a token: after white
                    // space, `<Name: `, `[`, `(`, `+`): never accepted.
                    if Bytes.isHex(c) { return false }
                    if c == UInt8(ascii: "?") {
                        // `0x?` stays `0x?` (`0X?` does not); in a reason, one right after
                        // another (white space between) is dropped.
                        if at(j + 1) != UInt8(ascii: "x") || (lastWasAddress && !frameMode) { return false }
                        armed = false
                        lineArmed = false
                        lastWasAddress = true
                        j += 3
                        continue
                    }
                }
                // Necessary for a UUID, a date, a time of day, an IPv4 address, a hex digest.
                if at(j + 8) == UInt8(ascii: "-") || at(j + 4) == UInt8(ascii: "-") || at(j + 1) == UInt8(ascii: ":")
                    || at(j + 2) == UInt8(ascii: ":") || at(j + 1) == UInt8(ascii: ".") || at(j + 2) == UInt8(ascii: ".")
                    || at(j + 3) == UInt8(ascii: ".") || hexRunReaches16(text, j, e)
                {
                    return false
                }
                var k = j
                while Bytes.isDigit(at(k)) { k += 1 }
                while at(k) == UInt8(ascii: ".") && Bytes.isDigit(at(k + 1)) {
                    k += 2
                    while Bytes.isDigit(at(k)) { k += 1 }
                }
                // A number the pass keeps: in a frame (not after `line`), after an error-code
                // word, or right after `#`. Any other becomes `<n>`.
                let keep = (frameMode && !lineArmed) || armed || (j > s && text[j - 1] == UInt8(ascii: "#"))
                if !keep { return false }
                if Bytes.isASCIIWord(at(k)) {
                    // Kept with its unit (`250ms`), or a token such as `64bit`: as sent.
                    if let u = Keywords.unitEnd(text, k, e), !Bytes.isASCIIWord(at(u)) {
                        k = u
                    } else {
                        k = scanWord(text, k, end: e, letterStart: false)
                    }
                }
                armed = false
                lineArmed = false
                lastWasAddress = false
                j = k
                continue
            }
            if Bytes.isAlpha(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: "$") {
                // Necessary for a UUID, a hex digest.
                if Bytes.isHex(b) && (at(j + 8) == UInt8(ascii: "-") || hexRunReaches16(text, j, e)) { return false }
                let k = scanWord(text, j, end: e, letterStart: true)
                let length = k - j
                let before = j > s ? text[j - 1] : 0
                // `/Users/name/`, `File.swift:12`, `new = value;`.
                if before == UInt8(ascii: "/") && at(k) == UInt8(ascii: "/")
                    && ((length == 5 && Keywords.equals(text, j, k, "Users")) || (length == 4 && Keywords.equals(text, j, k, "home")))
                {
                    return false
                }
                if before == UInt8(ascii: ".") && at(k) == UInt8(ascii: ":") && Bytes.isDigit(at(k + 1)) { return false }
                if length == 3 && at(k) == Bytes.space && (Keywords.equals(text, j, k, "new") || Keywords.equals(text, j, k, "old")) {
                    return false
                }
                armed = Keywords.isErrorCodeKeyword(text, j, k)
                lineArmed = length == 4 && Keywords.equalsLower(text, j, k, "line")
                lastWasAddress = false
                j = k
                continue
            }
            switch b {
            case UInt8(ascii: "+") where frameMode:
                // A symbol's offset, dropped (or kept after `0x?` and `(`): left to the pass.
                let m = at(j + 1) == Bytes.space ? j + 2 : j + 1
                if Bytes.isDigit(at(m)) { return false }
            case UInt8(ascii: "#") where inURL:
                return false  // a URL's fragment is dropped
            case UInt8(ascii: "?") where inURL:
                // A URL's query keeps its keys and drops its values: unchanged when every
                // value is empty and there is no fragment.
                var k = j + 1
                while k < e && !endsURL(text[k]) {
                    if text[k] == UInt8(ascii: "#") { return false }
                    while k < e {
                        let c = text[k]
                        if endsURL(c) || c == UInt8(ascii: "=") || c == UInt8(ascii: "&") || c == UInt8(ascii: "#") { break }
                        k += 1
                    }
                    if at(k) == UInt8(ascii: "=") {
                        k += 1
                        if k < e {
                            let c = text[k]
                            if !(endsURL(c) || c == UInt8(ascii: "&") || c == UInt8(ascii: "#")) { return false }
                        }
                    }
                    if at(k) == UInt8(ascii: "&") { k += 1 }
                }
                inURL = false
                armed = false
                lineArmed = false
                lastWasAddress = false
                j = k
                continue
            case UInt8(ascii: ":")
            where at(j + 1) == UInt8(ascii: "/") && at(j + 2) == UInt8(ascii: "/") && j > s
                && Bytes.isAlnum(text[j - 1]):
                inURL = true  // `scheme://`
                armed = false
                lineArmed = false
                lastWasAddress = false
                j += 1
                continue
            default:
                break
            }
            // Any other punctuation is written as it is (`<Name 0x1>` needs an address).
            switch b {
            case UInt8(ascii: "="), UInt8(ascii: ":"), UInt8(ascii: "("), UInt8(ascii: "["), UInt8(ascii: "-"), UInt8(ascii: "#"):
                break
            default:
                armed = false
                lineArmed = false
            }
            lastWasAddress = false
            if b == UInt8(ascii: "'") || b == UInt8(ascii: "\"") { inURL = false }
            j += 1
        }
        return true
    }

    /// Whether the bytes from `j` start with 16 hex digits (a hex digest needs them).
    @inline(__always) private static func hexRunReaches16(_ text: UnsafeBufferPointer<UInt8>, _ j: Int, _ e: Int) -> Bool {
        guard j + 16 <= e else { return false }
        for k in j..<(j + 16) where !Bytes.isHex(text[k]) { return false }
        return true
    }
}
