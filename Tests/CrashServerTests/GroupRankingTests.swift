import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// ``GroupRanking`` alone: candidates and counts are arrays, no storage.
@Suite struct GroupRankingTests {
    /// Candidates by (bound desc, id asc) after a position, as the stores yield them: the
    /// position found by binary search, so a walk over thousands of groups stays cheap (the
    /// suite runs beside real-time tests).
    static func countCandidates(
        _ bounds: [Int64: Int64]
    ) -> ((bound: Int64, id: Int64)?, Int64?, Int) -> [(id: Int64, bound: Int64)] {
        let sorted: [(id: Int64, bound: Int64)] = bounds.map { (id: $0.key, bound: $0.value) }.sorted(by: descending)
        return { after, atLeast, limit in
            var out: [(id: Int64, bound: Int64)] = []
            for c in sorted[firstAfter(after, in: sorted)...] {
                guard out.count < limit, c.bound >= atLeast ?? 0 else { break }
                out.append(c)
            }
            return out
        }
    }

    /// The index of the first of `sorted` (by ``descending(_:_:)``) that comes after `position`.
    static func firstAfter(_ position: (bound: Int64, id: Int64)?, in sorted: [(id: Int64, bound: Int64)]) -> Int {
        guard let position else { return 0 }
        var low = 0, high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if descending((id: position.id, bound: position.bound), sorted[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// The window counts of `ids` (every group's when nil), as the stores count them.
    static func counting(_ counts: [Int64: Int64]) -> ([Int64]?) -> [Int64: Int64] {
        { ids in
            guard let ids else { return counts }
            return ids.reduce(into: [:]) { found, id in found[id] = counts[id] }
        }
    }

    static func descending(_ a: (id: Int64, bound: Int64), _ b: (id: Int64, bound: Int64)) -> Bool {
        a.bound != b.bound ? a.bound > b.bound : a.id < b.id
    }

    static func timeCandidates(_ keys: [Int64: Int64]) -> ((Int64, Int64)?, Int) -> [(id: Int64, key: Int64)] {
        let sorted: [(id: Int64, bound: Int64)] = keys.map { (id: $0.key, bound: $0.value) }.sorted(by: descending)
        return { after, limit in
            sorted[firstAfter(after.map { (bound: $0.0, id: $0.1) }, in: sorted)...].prefix(limit).map { (id: $0.id, key: $0.bound) }
        }
    }

    /// Walks every page of a count ranking the way the controller does.
    static func walkByCount(limit: Int, counts: [Int64: Int64], bounds: [Int64: Int64]) async throws -> [[Int64]] {
        var pages: [[Int64]] = []
        var after: (key: Int64, id: Int64)?
        while true {
            let page = try await GroupRanking(limit: limit, after: after).byCount(
                candidates: countCandidates(bounds), counts: counting(counts))
            pages.append(page.prefix(limit).map(\.id))
            guard page.count > limit else { return pages }
            let last = page[limit - 1]
            after = (last.key, last.id)
        }
    }

    @Test func countOrderBreaksTiesByID() async throws {
        let counts: [Int64: Int64] = [5: 3, 2: 3, 9: 7, 1: 1, 4: 3]
        let page = try await GroupRanking(limit: 10, after: nil).byCount(
            candidates: Self.countCandidates(counts), counts: Self.counting(counts))
        #expect(page.map(\.id) == [9, 2, 4, 5, 1])
        #expect(page.map(\.count) == [7, 3, 3, 3, 1])
        #expect(page.map(\.key) == page.map(\.count))
    }

    @Test func pagesCoverEveryGroupOnceInOrder() async throws {
        // Bounds are all-time counts, above the window counts and in another order.
        var counts: [Int64: Int64] = [:], bounds: [Int64: Int64] = [:]
        for id in Int64(1)...1_500 {
            counts[id] = (id * 7919) % 13
            bounds[id] = counts[id]! + (id % 5)
        }
        counts = counts.filter { $0.value > 0 }  // groups without reports in the window are not counted
        let pages = try await Self.walkByCount(limit: 40, counts: counts, bounds: bounds)
        let expected = counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map(\.key)
        #expect(pages.flatMap { $0 } == expected)
        #expect(pages.dropLast().allSatisfy { $0.count == 40 })
        #expect(pages.last!.count == (expected.count % 40 == 0 ? 40 : expected.count % 40))
    }

    @Test func cursorExcludesThePreviousPageEvenOnTies() async throws {
        let counts: [Int64: Int64] = [1: 5, 2: 5, 3: 5, 4: 5]
        let page = try await GroupRanking(limit: 2, after: (key: 5, id: 2)).byCount(
            candidates: Self.countCandidates(counts), counts: Self.counting(counts))
        #expect(page.map(\.id) == [3, 4])
    }

    @Test func anEmptyPageAfterTheLastGroup() async throws {
        let counts: [Int64: Int64] = [1: 5]
        let page = try await GroupRanking(limit: 2, after: (key: 5, id: 1)).byCount(
            candidates: Self.countCandidates(counts), counts: Self.counting(counts))
        #expect(page.isEmpty)
    }

    @Test func looseBoundsFallBackToCountingEveryGroup() async throws {
        // Every bound is the same: the walk cannot stop early, and past the scan limit it
        // counts all groups at once (ids nil) instead of going on in batches.
        var counts: [Int64: Int64] = [:], bounds: [Int64: Int64] = [:]
        for id in Int64(1)...8_000 {
            bounds[id] = 1_000
            counts[id] = id == 7_777 ? 999 : 1
        }
        let calls = Calls()
        let page = try await GroupRanking(limit: 3, after: nil).byCount(
            candidates: Self.countCandidates(bounds),
            counts: { ids in
                if ids == nil { calls.all = true }
                return Self.counting(counts)(ids)
            })
        #expect(page.map(\.id) == [7_777, 1, 2, 3])
        #expect(calls.all)
    }

    @Test func theSecondRoundCountsOnlyTheBoundsThatCanEnterThePage() async throws {
        // Bounds four times the counts, as all-time counts are over a week's window. The
        // first round counts the 26 highest bounds; the 26th count (974) is the floor, and
        // the second round counts exactly the groups whose bound reaches it, then stops.
        var counts: [Int64: Int64] = [:], bounds: [Int64: Int64] = [:]
        for id in Int64(1)...999 {
            counts[id] = 1_000 - id
            bounds[id] = 4 * (1_000 - id)
        }
        let calls = Calls()
        let page = try await GroupRanking(limit: 25, after: nil).byCount(
            candidates: Self.countCandidates(bounds),
            counts: { ids in
                calls.counted.append(ids?.count ?? -1)
                return Self.counting(counts)(ids)
            })
        #expect(page.map(\.id) == Array(1...26))
        let reaching = bounds.values.filter { $0 >= 974 }.count
        #expect(calls.counted == [26, reaching - 26])
    }

    @Test func timeOrderSkipsGroupsWithoutWindowCounts() async throws {
        let keys: [Int64: Int64] = [1: 100, 2: 300, 3: 200, 4: 300]
        let counts: [Int64: Int64] = [1: 1, 2: 4, 4: 2]  // 3 has no report in the window
        let page = try await GroupRanking(limit: 2, after: nil).byTime(
            candidates: Self.timeCandidates(keys), counts: { Self.counting(counts)($0) })
        #expect(page.map(\.id) == [2, 4, 1])
        #expect(page.map(\.key) == [300, 300, 100])
        #expect(page.map(\.count) == [4, 2, 1])
        let next = try await GroupRanking(limit: 2, after: (key: 300, id: 4)).byTime(
            candidates: Self.timeCandidates(keys), counts: { Self.counting(counts)($0) })
        #expect(next.map(\.id) == [1])
    }

    @Test func groupsThatMovedSinceTheSnapshotKeepTheirPlace() async throws {
        // Group 5 got a report after the first page (current key 900); as of the snapshot
        // its key was 150, so under the cursor it ranks there. Group 6 had no report then.
        let keys: [Int64: Int64] = [1: 300, 2: 200, 5: 900, 6: 950, 3: 100]
        let counts: [Int64: Int64] = [1: 1, 2: 1, 3: 1, 5: 1, 6: 1]
        let page = try await GroupRanking(limit: 10, after: (key: 300, id: 1)).byTime(
            placed: [5: 150, 6: nil], candidates: Self.timeCandidates(keys), counts: { Self.counting(counts)($0) })
        #expect(page.map(\.id) == [2, 5, 3])
    }
}

private final class Calls: @unchecked Sendable {
    var all = false
    var counted: [Int] = []
}
