// URLs: query values and fragments.

extension Normalizer {
    @inline(__always) static func endsURL(_ b: UInt8) -> Bool {
        Bytes.isSpace(b) || b == UInt8(ascii: "'") || b == UInt8(ascii: "\"") || b == UInt8(ascii: "<")
            || b == UInt8(ascii: ">") || b == UInt8(ascii: ",") || b == UInt8(ascii: ")") || b == UInt8(ascii: "]")
            || b == UInt8(ascii: "}")
    }

    /// A URL's query keeps its keys and drops its values: `?page=2&token=abc` -> `?page=&token=`.
    mutating func query(_ j: Int) -> Int {
        flushSpace()
        out.append(UInt8(ascii: "?"))
        var k = j + 1
        while k < line.end && !Self.endsURL(src[k]) {
            if src[k] == UInt8(ascii: "#") {
                while k < line.end && !Self.endsURL(src[k]) { k += 1 }
                break
            }
            let s = k
            while k < line.end {
                let b = src[k]
                if Self.endsURL(b) || b == UInt8(ascii: "=") || b == UInt8(ascii: "&") || b == UInt8(ascii: "#") { break }
                k += 1
            }
            out.append(src.baseAddress! + s, count: k - s)
            if at(k) == UInt8(ascii: "=") {
                out.append(UInt8(ascii: "="))
                k += 1
                while k < line.end {
                    let b = src[k]
                    if Self.endsURL(b) || b == UInt8(ascii: "&") || b == UInt8(ascii: "#") { break }
                    k += 1
                }
            }
            if at(k) == UInt8(ascii: "&") {
                out.append(UInt8(ascii: "&"))
                k += 1
            }
        }
        line.inURL = false
        clearFlags()
        return k
    }

    /// A URL's `#fragment` is dropped.
    mutating func fragment(_ j: Int) -> Int {
        var k = j
        while k < line.end && !Self.endsURL(src[k]) { k += 1 }
        line.inURL = false
        return k
    }
}
