// Frames: recognizing a frame line, its index, addresses and offsets.

extension Normalizer {
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
        var m = line.end
        while m > j && Bytes.isSpace(src[m - 1]) { m -= 1 }
        guard m - j >= 6, src[m - 1] == UInt8(ascii: "]") else { return false }
        var h = m - 2
        while h > j && Bytes.isHex(src[h]) { h -= 1 }
        return h >= j + 3 && h < m - 2 && src[h] == UInt8(ascii: "x") && src[h - 1] == UInt8(ascii: "0")
            && src[h - 2] == UInt8(ascii: "[") && src[h - 3] == UInt8(ascii: ")")
    }

    func startsWith(_ k: Int, _ s: StaticString) -> Bool {
        let n = s.utf8CodeUnitCount
        guard k + n <= line.end else { return false }
        let p = s.utf8Start
        for m in 0..<n where src[k + m] != p[m] { return false }
        return true
    }

    /// A standalone `0x` with at least 8 hex digits.
    func hasLongAddress(_ j: Int) -> Bool {
        var k = j
        while k + 10 <= line.end {
            if src[k] == UInt8(ascii: "0") && src[k + 1] | 0x20 == UInt8(ascii: "x") && k > line.start
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
            if m >= line.end || isSpaceAt(m) { k = m }
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
                line.pendingSpace = out.count > line.outStart && out.last == Bytes.space
                if line.pendingSpace { out.removeLast() }
                end = next.end
            }
            return end
        }
        flushSpace()
        out.append(UInt8(ascii: "+"))
        if operand.hadSpace { out.append(Bytes.space) }
        if line.keepNumbers {
            out.append(src.baseAddress! + operand.numberStart, count: operand.end - operand.numberStart)
        } else {
            emit(operand.hex ? "0x?" : "<n>")
        }
        clearFlags()
        return operand.end
    }

    /// Whether a `+ offset` written now stays: after a load address (`0x? + 12345`) or
    /// right inside `(` (`(+0x3143)`).
    var offsetIsKept: Bool {
        line.lastWasAddress || (!line.pendingSpace && out.count > line.outStart && out.last == UInt8(ascii: "("))
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

    /// The most common frame, `3   Demo   0x100a1b2c3 -[A b:] + 44` (an index, the image,
    /// the address, the symbol and its offset), read without a pass: a pass writes it as the
    /// image and the symbol joined by one space (`Demo -[A b:]`), and ``Grouping`` checks that
    /// this text is a fixed point (``FixedPointMemo``) before it uses it. Returns the image's
    /// and the symbol's ranges, or nil for every frame a rule could read otherwise.
    ///
    /// Why a pass writes exactly that, given the checks below: the index is dropped
    /// (`stripFrameIndex`); the image is a word read as in `image symbol`, a space follows it
    /// in both texts; an address not followed by `+ <digit>` is dropped in frame rules
    /// without touching the scanner's state (`address`), so the symbol is read in the same
    /// state as after `image `; then ` + 44` is dropped as an offset: the symbol does not end
    /// with an address (which keeps it, `0x? + 12345`) or with a `+` (a chain of pluses), and
    /// nothing after the symbol remains. What could look past the symbol's end into the
    /// offset is excluded: `@` (e-mail addresses) and line breaks (one line only). A KVO change
    /// value (`new = `) that reads to the line's end replaces the offset too, in both texts.
    /// Debug builds compare the result with a real pass.
    static func appleFrameParts(_ src: UnsafeBufferPointer<UInt8>) -> (image: Range<Int>, symbol: Range<Int>)? {
        guard let p = src.baseAddress else { return nil }
        var end = src.count
        while end > 0 && Bytes.isSpace(p[end - 1]) { end -= 1 }
        guard end > 0, Bytes.isDigit(p[0]) else { return nil }
        let parts = FrameParts(src, end: end)
        guard let image = parts.image, let address = parts.appleAddressStart, let symbol = parts.symbol(in: src) else {
            return nil
        }
        // The image: letters, digits, `.`, `_`, `-`, `+` (nothing a rule reads across tokens).
        for k in image {
            let b = p[k]
            guard
                Bytes.isAlnum(b) || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
                    || b == UInt8(ascii: "+")
            else { return nil }
        }
        // One line, without `@` (e-mail addresses are the one rule whose memo spans tokens).
        let (lineEnd, hasAt) = Bytes.lineEnd(p, from: 0, to: end)
        guard lineEnd == end, !hasAt else { return nil }
        // The address: `0x` and hex digits, then white space.
        var k = address + 2
        while k < end && Bytes.isHex(p[k]) { k += 1 }
        guard k > address + 2, k < end, Bytes.isSpace(p[k]) else { return nil }
        // A symbol that starts with `+ <digit>` is the offset of an unsymbolicated frame.
        if p[symbol.lowerBound] == UInt8(ascii: "+") {
            let m = Bytes.skipSpaces(p, symbol.lowerBound + 1, end)
            if m < end && Bytes.isDigit(p[m]) { return nil }
        }
        // The symbol's last token: no address (`0x1f`, `0x?`), no `+`.
        let last = p[symbol.upperBound - 1]
        if last == UInt8(ascii: "?") || last == UInt8(ascii: "+") { return nil }
        var h = symbol.upperBound
        while h > symbol.lowerBound && Bytes.isHex(p[h - 1]) { h -= 1 }
        if h - symbol.lowerBound >= 2 && p[h - 1] | 0x20 == UInt8(ascii: "x") && p[h - 2] == UInt8(ascii: "0") { return nil }
        // After the symbol: nothing, or exactly ` + 44` / ` + 0x2c`.
        if symbol.upperBound < end {
            var m = Bytes.skipSpaces(p, symbol.upperBound, end)
            guard m > symbol.upperBound, m < end, p[m] == UInt8(ascii: "+") else { return nil }
            m = Bytes.skipSpaces(p, m + 1, end)
            if m + 2 < end && p[m] == UInt8(ascii: "0") && p[m + 1] | 0x20 == UInt8(ascii: "x") && Bytes.isHex(p[m + 2]) {
                m += 2
                while m < end && Bytes.isHex(p[m]) { m += 1 }
            } else {
                guard m < end, Bytes.isDigit(p[m]) else { return nil }
                while m < end && Bytes.isDigit(p[m]) { m += 1 }
            }
            guard m == end else { return nil }
        }
        return (image, symbol)
    }
}
