// Numbers and hex addresses.

extension Normalizer {
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
        // Each shape's first test inline: a plain number pays no call for the shapes it is not.
        let b1 = at(j + 1)
        let b2 = at(j + 2)
        if j + 36 <= line.end && src[j + 8] == UInt8(ascii: "-"), let k = uuid(j) { return placeholder("<uuid>", end: k) }
        if at(j + 4) == UInt8(ascii: "-"), let (k, _) = dateTime(j) { return placeholder("<time>", end: k) }
        if b1 == UInt8(ascii: ":") || b2 == UInt8(ascii: ":"), let k = timeOfDay(j) { return placeholder("<time>", end: k) }
        if b1 == UInt8(ascii: ".") || b2 == UInt8(ascii: ".") || at(j + 3) == UInt8(ascii: "."), let k = ipv4(j) {
            return placeholder("<ip>", end: k)
        }
        if j + 16 <= line.end && Bytes.isHex(b1), let k = hexDigest(j) { return placeholder("<hex>", end: k) }
        if line.hasAt && j >= emailFailEnd, let k = email(j) { return placeholder("<email>", end: k) }
        var k = j
        while Bytes.isDigit(at(k)) { k += 1 }
        while at(k) == UInt8(ascii: ".") && Bytes.isDigit(at(k + 1)) {
            k += 2
            while Bytes.isDigit(at(k)) { k += 1 }
        }
        let keep =
            (line.keepNumbers && !line.lineArmed) || line.armed
            || (!line.pendingSpace && out.count > line.outStart && out.last == UInt8(ascii: "#"))
        if isWordAt(k) {
            if let u = Keywords.unitEnd(src, k, line.end), !isWordAt(u) {
                if keep {
                    emitRaw(j, k)
                } else {
                    dropSign()
                    emit("<n>")
                }
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
        dropSign()
        return placeholder("<n>", end: k)
    }

    /// v2: the `-` just written before a number that becomes `<n>` goes too, when it is a
    /// sign (at the start, after white space or an opening `(`, `[`, `{`, `=`, `:`, `,`),
    /// not a range or a subtraction (`<n>-<n>`, `a-1`). `(-3)` and `(49)` are one bug.
    @inline(__always) mutating func dropSign() {
        guard rules.negativeNumbers, !line.pendingSpace, out.count > line.outStart,
            out[out.count - 1] == UInt8(ascii: "-")
        else { return }
        if out.count - 1 > line.outStart {
            switch out[out.count - 2] {
            case Bytes.space, UInt8(ascii: "("), UInt8(ascii: "["), UInt8(ascii: "{"), UInt8(ascii: "="),
                UInt8(ascii: ":"), UInt8(ascii: ","):
                break
            default:
                return
            }
        }
        out.removeLast()
    }

    /// A hex token `0x...` in `[j, k)`.
    mutating func address(_ j: Int, _ k: Int) -> Int {
        if line.frameRules {
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
                    line.armed = false
                    line.lastWasAddress = true
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
        if zeros && !rules.nullIsAddress {
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
        if line.lastWasAddress && !line.frameRules {
            line.pendingSpace = false
            return
        }
        emit("0x?")
        line.armed = false
        line.lineArmed = false
        line.lastWasAddress = true
    }
}
