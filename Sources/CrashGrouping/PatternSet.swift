/// A compiled list of `FrameTable` patterns, matched against UTF-8 bytes without building
/// strings: exact names through an open-addressing hash table, the others (`abc*`, `*abc`,
/// `*abc*`, `a*b`) by a scan of their short lists.
///
/// Frame classification runs on every frame up to the third app frame of every report, so
/// the layout is flat: every pattern's bytes live in one array and the tables hold offsets,
/// so a lookup touches no reference-counted storage but the few arrays it reads.
struct PatternSet: Sendable {
    /// Every pattern's bytes, back to back; a pattern is a `Slot` into it.
    private var bytes: [UInt8] = []
    struct Slot: Sendable {
        var start: Int32
        var count: Int32
    }

    /// Exact names: open addressing over FNV-1a hashes (a power-of-two table, -1 = empty).
    private var exactTable: [Int32] = []
    private var exactHashes: [UInt64] = []
    private var exactSlots: [Slot] = []
    /// Bit `n` (n < 63) set when some exact name has `n` bytes; bit 63: one has 63 or more.
    private var exactLengths: UInt64 = 0

    /// Prefix and infix patterns grouped by their first byte: the patterns of byte `b` are
    /// `prefixSlots[prefixStart[b]..<prefixStart[b + 1]]`.
    private var prefixStart: [Int32] = []
    private var prefixSlots: [Slot] = []
    private var infixStart: [Int32] = []
    private var infixSlots: [Slot] = []
    private var suffixSlots: [Slot] = []
    private var prefixSuffixSlots: [(Slot, Slot)] = []

    init(_ patterns: [String]) {
        var exact: [Slot] = []
        var prefixes: [[Slot]] = Array(repeating: [], count: 256)
        var infixes: [[Slot]] = Array(repeating: [], count: 256)
        func add(_ part: ArraySlice<UInt8>) -> Slot {
            let slot = Slot(start: Int32(bytes.count), count: Int32(part.count))
            bytes.append(contentsOf: part)
            return slot
        }
        for pattern in patterns {
            let all = Array(pattern.utf8)
            let stars = all.indices.filter { all[$0] == UInt8(ascii: "*") }
            switch stars.count {
            case 0:
                exact.append(add(all[...]))
            case 1 where stars[0] == all.count - 1:
                let prefix = all.dropLast()
                prefixes[Int(prefix.first ?? 0)].append(add(prefix))
            case 1 where stars[0] == 0:
                suffixSlots.append(add(all.dropFirst()))
            case 1:
                prefixSuffixSlots.append((add(all[..<stars[0]]), add(all[(stars[0] + 1)...])))
            case 2 where stars[0] == 0 && stars[1] == all.count - 1:
                let infix = all.dropFirst().dropLast()
                infixes[Int(infix.first ?? 0)].append(add(infix))
            default:
                preconditionFailure("unsupported FrameTable pattern '\(pattern)'")
            }
        }
        func flatten(_ lists: [[Slot]]) -> ([Int32], [Slot]) {
            var starts: [Int32] = [0]
            var slots: [Slot] = []
            for list in lists {
                slots += list
                starts.append(Int32(slots.count))
            }
            return (starts, slots)
        }
        (prefixStart, prefixSlots) = flatten(prefixes)
        (infixStart, infixSlots) = flatten(infixes)
        var size = 16
        while size < exact.count * 4 { size *= 2 }
        exactTable = Array(repeating: -1, count: size)
        for slot in exact {
            let h = bytes.withUnsafeBufferPointer { Self.hash($0[Int(slot.start)..<Int(slot.start + slot.count)]) }
            var i = Int(truncatingIfNeeded: h) & (size - 1)
            while exactTable[i] >= 0 { i = (i + 1) & (size - 1) }
            exactTable[i] = Int32(exactSlots.count)
            exactSlots.append(slot)
            exactHashes.append(h)
            exactLengths |= 1 << UInt64(min(Int(slot.count), 63))
        }
    }

    /// FNV-1a: cheap, and good enough for a few hundred fixed names.
    @inline(__always) static func hash<C: Collection>(_ bytes: C) -> UInt64 where C.Element == UInt8 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    func matches(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Bool {
        guard !text.isEmpty else { return false }
        return bytes.withUnsafeBufferPointer { p in
            let base = text.base
            let t0 = text.startIndex, n = text.count
            @inline(__always) func equal(_ slot: Slot, at k: Int) -> Bool {
                var m = 0
                let s = Int(slot.start)
                while m < Int(slot.count) {
                    if base[k + m] != p[s + m] { return false }
                    m += 1
                }
                return true
            }
            if exactLengths & (1 << UInt64(min(n, 63))) != 0 {
                let h = Self.hash(text)
                let mask = exactTable.count - 1
                var i = Int(truncatingIfNeeded: h) & mask
                while true {
                    let e = Int(exactTable[i])
                    if e < 0 { break }
                    let slot = exactSlots[e]
                    if exactHashes[e] == h && Int(slot.count) == n && equal(slot, at: t0) { return true }
                    i = (i + 1) & mask
                }
            }
            let first = Int(base[t0])
            for e in Int(prefixStart[first])..<Int(prefixStart[first + 1]) {
                let slot = prefixSlots[e]
                if n >= Int(slot.count) && equal(slot, at: t0) { return true }
            }
            for slot in suffixSlots where n >= Int(slot.count) && equal(slot, at: t0 + n - Int(slot.count)) { return true }
            for (prefix, suffix) in prefixSuffixSlots
            where n >= Int(prefix.count + suffix.count) && equal(prefix, at: t0) && equal(suffix, at: t0 + n - Int(suffix.count)) {
                return true
            }
            if !infixSlots.isEmpty {
                // One scan: at each byte, only the infixes that start with it.
                var i = t0
                let end = t0 + n
                while i < end {
                    let b = Int(base[i])
                    for e in Int(infixStart[b])..<Int(infixStart[b + 1]) {
                        let slot = infixSlots[e]
                        if end - i >= Int(slot.count) && equal(slot, at: i) { return true }
                    }
                    i += 1
                }
            }
            return false
        }
    }
}
