// Object descriptions: `<Student 0x...>`, `<UIView: 0x...; frame = ...>`.

extension Normalizer {
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
        out.append(src.baseAddress! + j + 1, count: nameEnd - j - 1)
        out.append(UInt8(ascii: ">"))
        clearFlags()
        return end
    }

    /// The `>` that closes the `<` at `j` on this line, nesting respected.
    mutating func matchingClose(_ j: Int) -> Int? {
        if closeTableLine != line.start {
            closeTableLine = line.start
            closeTable = [Int32](repeating: -1, count: line.end - line.start)
            var stack: [Int32] = []
            for m in line.start..<line.end {
                if src[m] == UInt8(ascii: "<") {
                    stack.append(Int32(m - line.start))
                } else if src[m] == UInt8(ascii: ">"), let open = stack.popLast() {
                    closeTable[Int(open)] = Int32(m - line.start)
                }
            }
        }
        let close = closeTable[j - line.start]
        return close < 0 ? nil : Int(close) + line.start
    }
}
