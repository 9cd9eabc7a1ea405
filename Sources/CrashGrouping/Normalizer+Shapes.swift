// Fixed shapes: UUIDs, hex digests, dates and times, IPv4, e-mail addresses.

extension Normalizer {
    /// `8-4-4-4-12` hex digits.
    func uuid(_ j: Int) -> Int? {
        guard j + 36 <= line.end, src[j + 8] == UInt8(ascii: "-") else { return nil }
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
        while k < line.end {
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
        guard line.hasAt, j >= emailFailEnd else { return nil }
        var k = j
        while k < line.end {
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
}
