// Log prefixes at the start of a reason line.

extension Normalizer {
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
        while m < line.end {
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
        guard m >= line.end || Bytes.isSpace(src[m]) else { return nil }
        return m
    }
}
