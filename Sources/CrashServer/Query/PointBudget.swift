/// The bound on what a stats or trend answer holds (contract, "Bounded queries"): at most
/// ``maxPoints`` points in all, series times buckets. A window whose buckets alone are more is
/// a 400 (``TimeWindow/checkBuckets(_:parameter:)``); past that, the series of highest total
/// count that fit are kept, ties by key, and the answer says `"truncated": true`.
enum PointBudget {
    static let maxPoints = 10_000

    /// How many series of `buckets` points fit (at least one).
    static func series(buckets: Int) -> Int { buckets == 0 ? Int.max : max(1, maxPoints / buckets) }

    /// The `limit` keys of `totals` with the highest totals, ties by key (UTF-8 order, as
    /// PostgreSQL's `COLLATE "C"`); all of them when they fit.
    static func top<Key: Hashable>(_ totals: [Key: Int64], limit: Int, key order: (Key, Key) -> Bool) -> Set<Key> {
        guard totals.count > limit else { return Set(totals.keys) }
        let ranked = totals.sorted { a, b in a.value != b.value ? a.value > b.value : order(a.key, b.key) }
        return Set(ranked.prefix(limit).map(\.key))
    }

    /// Byte order of optional keys, nil first.
    static func keyOrder(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return false
        case (nil, _): return true
        case (_, nil): return false
        case let (a?, b?): return a.utf8.lexicographicallyPrecedes(b.utf8)
        }
    }
}
