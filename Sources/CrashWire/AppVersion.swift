/// Numeric dotted comparison of app versions (`1.10.0` > `1.4.0`), as the contract orders them.
///
/// Each dot-separated part compares by its leading number; missing parts count as 0
/// (`1.4` == `1.4.0`); a part's non-numeric tail breaks ties by text.
public enum AppVersion {
    /// `true` when `a` sorts before `b`.
    public static func less(_ a: String, _ b: String) -> Bool { compare(a, b) < 0 }

    /// -1, 0 or 1 as `a` is lower than, equal to or higher than `b`.
    public static func compare(_ a: String, _ b: String) -> Int {
        Key(a).compare(Key(b))
    }

    /// A version split once into its dot-separated parts (leading number, then the rest),
    /// so that sorting many versions parses each one once.
    public struct Key: Comparable, Sendable {
        private let numbers: [Int]
        private let tails: [Substring]

        /// Parses `version`.
        public init(_ version: String) {
            var numbers: [Int] = []
            var tails: [Substring] = []
            for part in version.split(separator: ".", omittingEmptySubsequences: false) {
                var n = 0
                var idx = part.startIndex
                while idx < part.endIndex, let d = part[idx].wholeNumberValue, part[idx].isASCII {
                    n = n &* 10 &+ d
                    idx = part.index(after: idx)
                    if n > 1_000_000_000_000 { break }
                }
                numbers.append(n)
                tails.append(part[idx...])
            }
            self.numbers = numbers
            self.tails = tails
        }

        /// -1, 0 or 1 as `self` is lower than, equal to or higher than `other`; missing
        /// parts count as `0`.
        public func compare(_ other: Key) -> Int {
            for i in 0..<max(numbers.count, other.numbers.count) {
                let na = i < numbers.count ? numbers[i] : 0, nb = i < other.numbers.count ? other.numbers[i] : 0
                if na != nb { return na < nb ? -1 : 1 }
                let ta = i < tails.count ? tails[i] : Substring(), tb = i < other.tails.count ? other.tails[i] : Substring()
                if ta != tb { return ta < tb ? -1 : 1 }
            }
            return 0
        }

        public static func < (a: Key, b: Key) -> Bool { a.compare(b) < 0 }

        public static func == (a: Key, b: Key) -> Bool { a.compare(b) == 0 }
    }
}
