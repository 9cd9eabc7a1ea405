/// The order of a crash-list page, as a pure walk over two closures: one that yields
/// candidate groups in the order of a key (an upper bound of the count, or the time), one
/// that counts groups in the window. No storage in here: the store supplies the closures,
/// and the unit tests supply arrays.
///
/// A page is up to `limit` entries after the cursor position `after` (key, id), plus one
/// more when there is a next page. Ties go by id ascending.
struct GroupRanking: Sendable {
    /// One ranked group: its window count and its sort key (the count, or a time in µs).
    struct Entry: Sendable, Hashable {
        var id: Int64
        var count: Int64
        var key: Int64
    }

    /// Entries on the page.
    let limit: Int
    /// Where the previous page ended: (key, id).
    let after: (key: Int64, id: Int64)?

    /// Past this many candidates the bounds are too loose: count every group at once.
    static let countScanLimit = 5_000

    /// The page by window count descending.
    ///
    /// A threshold walk: `candidates(after, atLeast, batch)` yields groups by an upper bound
    /// of their count (highest first, then id; only bounds of at least `atLeast` when it is
    /// set); `counts(ids)` counts the given groups (nil: every group) and leaves out those
    /// with none or that the filters exclude. The first round counts the page's worth of
    /// highest bounds; once the page is full, its last count is a floor no group below it
    /// can reach, so the second round fetches every candidate whose bound reaches that
    /// floor at once, and the walk ends: two rounds that count about as many groups as the
    /// bounds require. (Before, a first batch of 600 was counted whatever the bounds: the
    /// top crashes at 10 M reports counted 600 groups to show 25.)
    func byCount(
        candidates: (_ after: (bound: Int64, id: Int64)?, _ atLeast: Int64?, _ limit: Int) async throws -> [(id: Int64, bound: Int64)],
        counts: (_ ids: [Int64]?) async throws -> [Int64: Int64]
    ) async throws -> [Entry] {
        var best: [Entry] = []
        var position: (bound: Int64, id: Int64)?
        var batch = limit + 1
        var scanned = 0
        while true {
            if scanned >= Self.countScanLimit {
                return Array(ranked(try await counts(nil)).prefix(limit + 1))
            }
            // With a full page, only bounds that reach its last count can still enter it.
            let floor = best.count == limit + 1 ? best[limit].count : nil
            let wanted = floor == nil ? batch : Self.countScanLimit - scanned
            let found = try await candidates(position, floor, wanted)
            guard let last = found.last else { break }
            scanned += found.count
            best = Array((best + ranked(try await counts(found.map(\.id)))).sorted(by: Self.before).prefix(limit + 1))
            position = (last.bound, last.id)
            if found.count < wanted { break }
            if best.count == limit + 1, best[limit].count > last.bound { break }
            batch = min(max(600, 12 * (limit + 1), batch * 2), 3_200)
        }
        return best
    }

    /// The page by a time key (`lastSeen` or `firstSeen`, µs) descending.
    ///
    /// `placed` are groups whose key moved since the first page's snapshot, with their key
    /// as of it (nil: no report then): they rank by that key and the walk over current keys
    /// skips them, so a walk under a cursor keeps its order. `candidates(after, batch)`
    /// yields groups by current key descending, then id.
    func byTime(
        placed: [Int64: Int64?] = [:],
        candidates: (_ after: (Int64, Int64)?, _ limit: Int) async throws -> [(id: Int64, key: Int64)],
        counts: (_ ids: [Int64]) async throws -> [Int64: Int64]
    ) async throws -> [Entry] {
        var found: [Entry] = []
        let moved = placed.compactMap { id, key in key.map { (id: id, key: $0) } }
        if !moved.isEmpty {
            let n = try await counts(moved.map(\.id))
            for entry in moved {
                guard let count = n[entry.id] else { continue }
                let item = Entry(id: entry.id, count: count, key: entry.key)
                if isAfterCursor(item) { found.append(item) }
            }
        }
        var position = after.map { ($0.key, $0.id) }
        let batch = max(100, 2 * (limit + 1))
        while true {
            let page = try await candidates(position, batch)
            guard let last = page.last else { break }
            let n = try await counts(page.map(\.id))
            for candidate in page where placed[candidate.id] == nil {
                guard let count = n[candidate.id] else { continue }
                let item = Entry(id: candidate.id, count: count, key: candidate.key)
                if isAfterCursor(item) { found.append(item) }
            }
            found.sort(by: Self.before)
            if found.count > limit { found = Array(found.prefix(limit + 1)) }
            position = (last.key, last.id)
            if page.count < batch { break }
            // Groups not walked yet keep their current key, at most the last one's.
            if found.count > limit, found[limit].key > last.key { break }
        }
        found.sort(by: Self.before)
        return Array(found.prefix(limit + 1))
    }

    /// Key descending, then id ascending.
    static func before(_ a: Entry, _ b: Entry) -> Bool { a.key != b.key ? a.key > b.key : a.id < b.id }

    private func isAfterCursor(_ entry: Entry) -> Bool {
        guard let after else { return true }
        return entry.key < after.key || (entry.key == after.key && entry.id > after.id)
    }

    private func ranked(_ counts: [Int64: Int64]) -> [Entry] {
        counts.map { Entry(id: $0.key, count: $0.value, key: $0.value) }.filter(isAfterCursor).sorted(by: Self.before)
    }
}
