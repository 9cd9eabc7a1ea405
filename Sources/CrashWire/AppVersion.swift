/// Numeric dotted comparison of app versions (`1.10.0` > `1.4.0`), as the contract orders them.
///
/// Each dot-separated part compares by its leading number; missing parts count as 0
/// (`1.4` == `1.4.0`); a part's non-numeric tail breaks ties by text.
public enum AppVersion {
    /// `true` when `a` sorts before `b`.
    public static func less(_ a: String, _ b: String) -> Bool { compare(a, b) < 0 }

    /// -1, 0 or 1 as `a` is lower than, equal to or higher than `b`.
    public static func compare(_ a: String, _ b: String) -> Int {
        let pa = a.split(separator: ".", omittingEmptySubsequences: false)
        let pb = b.split(separator: ".", omittingEmptySubsequences: false)
        for i in 0..<max(pa.count, pb.count) {
            let (na, ta) = i < pa.count ? split(pa[i]) : (0, Substring())
            let (nb, tb) = i < pb.count ? split(pb[i]) : (0, Substring())
            if na != nb { return na < nb ? -1 : 1 }
            if ta != tb { return ta < tb ? -1 : 1 }
        }
        return 0
    }

    private static func split(_ part: Substring) -> (Int, Substring) {
        var n = 0
        var idx = part.startIndex
        while idx < part.endIndex, let d = part[idx].wholeNumberValue, part[idx].isASCII {
            n = n &* 10 &+ d
            idx = part.index(after: idx)
            if n > 1_000_000_000_000 { break }
        }
        return (n, part[idx...])
    }
}
