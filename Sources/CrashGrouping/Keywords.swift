/// The fixed word lists of grouping v1. Changing any list is a new grouping version.
enum Keywords {
    /// A number right after one of these words (ignoring ` `, `=`, `:`, `(`, `-`, `#`) is an
    /// error code, signal or status, and names the failure: `Code=-1009`, `errno 13`,
    /// `signal 11`, `status code was unacceptable: 404` (Alamofire), `(OSStatus error -50.)`.
    static let errorCodeWords: [StaticString] = [
        "code", "errno", "error", "err", "status", "statuscode", "osstatus", "signal", "http", "errorcode",
        "exitcode", "unacceptable",
    ]

    /// Source file extensions whose `:line(:column)` suffix is dropped.
    static let sourceExtensions: [StaticString] = [
        "swift", "m", "mm", "c", "cc", "cpp", "cxx", "h", "hpp", "java", "kt", "kts", "js", "mjs", "cjs", "ts", "tsx",
        "jsx", "py", "rb", "go", "rs", "dart", "cs", "php", "scala",
    ]

    /// Hex values that are codes with a meaning, not addresses (Apple's termination and
    /// exception codes): they stay as sent.
    static let namedCodes: [StaticString] = [
        "8badf00d", "deadfa11", "dead10cc", "c00010ff", "bad22222", "baaaaaad", "bbadbeef", "2bad45ec", "c51bad01",
        "badf00d", "baadca11",
    ]

    /// Units that may follow a number directly (`250ms`, `16MB`): the number varies, the
    /// unit stays.
    static let units: [StaticString] = [
        "ns", "us", "\u{00B5}s", "ms", "s", "sec", "secs", "min", "mins", "h", "hr", "hrs", "B", "KB", "kB", "MB", "GB",
        "TB", "KiB", "MiB", "GiB", "TiB",
    ]

    @inline(__always) static func equals(
        _ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int, _ s: StaticString
    )
        -> Bool
    {
        let n = s.utf8CodeUnitCount
        guard k - j == n else { return false }
        let p = s.utf8Start
        for m in 0..<n where src[j + m] != p[m] { return false }
        return true
    }

    /// Case-insensitive (ASCII) comparison with a lowercase word.
    @inline(__always) static func equalsLower(
        _ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int, _ s: StaticString
    )
        -> Bool
    {
        let n = s.utf8CodeUnitCount
        guard k - j == n else { return false }
        let p = s.utf8Start
        for m in 0..<n {
            var b = src[j + m]
            if b &- 0x41 < 26 { b |= 0x20 }
            if b != p[m] { return false }
        }
        return true
    }

    @inline(__always) static func isErrorCodeKeyword(_ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int) -> Bool {
        let n = k - j
        return n >= 3 && n <= 12 && errorCodeLengths(first: src[j]) & (1 << n) != 0 && isErrorCodeWord(src, j, k)
    }

    static func isErrorCodeWord(_ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int) -> Bool {
        for w in errorCodeWords where equalsLower(src, j, k, w) { return true }
        return false
    }

    /// The lengths of the `errorCodeWords` that start with `first` (either case), bit `n` for
    /// a word of `n` letters: a filter that spares nearly every word the comparisons (a test
    /// checks it against the list).
    @inline(__always) static func errorCodeLengths(first: UInt8) -> UInt16 {
        switch first | 0x20 {
        case UInt8(ascii: "c"): return 1 << 4  // code
        case UInt8(ascii: "e"): return 1 << 3 | 1 << 5 | 1 << 8 | 1 << 9  // err, errno, error, exitcode, errorcode
        case UInt8(ascii: "h"): return 1 << 4  // http
        case UInt8(ascii: "o"): return 1 << 8  // osstatus
        case UInt8(ascii: "s"): return 1 << 6 | 1 << 10  // status, signal, statuscode
        case UInt8(ascii: "u"): return 1 << 12  // unacceptable
        default: return 0
        }
    }

    static func isSourceExtension(_ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int) -> Bool {
        guard k - j <= 5 else { return false }
        for w in sourceExtensions where equals(src, j, k, w) { return true }
        return false
    }

    /// `[j, k)` is `0x` and hex digits.
    static func isNamedCode(_ src: UnsafeBufferPointer<UInt8>, _ j: Int, _ k: Int) -> Bool {
        for w in namedCodes where equalsLower(src, j + 2, k, w) { return true }
        return false
    }

    /// The end of a unit starting at `k`, longest match first; the caller checks the boundary.
    static func unitEnd(_ src: UnsafeBufferPointer<UInt8>, _ k: Int, _ e: Int) -> Int? {
        var best: Int?
        for u in units {
            let n = u.utf8CodeUnitCount
            guard k + n <= e else { continue }
            if equals(src, k, k + n, u), best.map({ k + n > $0 }) ?? true {
                // Only a unit that ends the word counts.
                let next = k + n < e ? src[k + n] : 0
                if !(Bytes.isASCIIWord(next)) { best = k + n }
            }
        }
        return best
    }
}
