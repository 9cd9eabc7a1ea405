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

    /// Exact names: open addressing over ``hash(_:_:)`` (a power-of-two table, -1 = empty).
    private var exactTable: [Int32] = []
    private var exactHashes: [UInt64] = []
    private var exactSlots: [Slot] = []
    /// Bit `n` (n < 63) set when some exact name has `n` bytes; bit 63: one has 63 or more.
    private var exactLengths: UInt64 = 0

    /// Prefix patterns grouped by a hash of their first four bytes (``bucket(_:)``), so that
    /// the thirty `lib...*` images are not all tried on every `lib` name: the patterns of
    /// bucket `b` are `prefixSlots[prefixStart[b]..<prefixStart[b + 1]]`. Prefixes shorter
    /// than four bytes are grouped by their first byte, as infixes are.
    private var prefixStart: [Int32] = []
    private var prefixSlots: [Slot] = []
    private var shortPrefixStart: [Int32] = []
    private var shortPrefixSlots: [Slot] = []
    private var infixStart: [Int32] = []
    private var infixSlots: [Slot] = []
    private var suffixSlots: [Slot] = []
    private var prefixSuffixSlots: [(Slot, Slot)] = []
    /// A filter in front of the infix scan (``mayHoldInfix(_:_:)``): when every infix has at
    /// least `infixStride + 3` bytes, an occurrence covers one of the four-byte windows at
    /// `0, infixStride, 2 * infixStride, ...`, at an offset below `infixStride` into the
    /// infix. `infixGrams` has the bit (``gramBit(_:)``) of every such four bytes of every
    /// infix set: a text none of whose windows has its bit set holds no infix. 0 when some
    /// infix is shorter (then every text is scanned).
    private var infixStride = 0
    private var infixGrams: [UInt64] = []

    init(_ patterns: [String]) {
        var exact: [Slot] = []
        var prefixes: [[Slot]] = Array(repeating: [], count: 256)
        var shortPrefixes: [[Slot]] = Array(repeating: [], count: 256)
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
                if prefix.count >= 4 {
                    prefixes[prefix.withUnsafeBufferPointer { Self.bucket($0.baseAddress!) }].append(add(prefix))
                } else {
                    shortPrefixes[Int(prefix.first ?? 0)].append(add(prefix))
                }
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
        (shortPrefixStart, shortPrefixSlots) = flatten(shortPrefixes)
        (infixStart, infixSlots) = flatten(infixes)
        let shortestInfix = infixSlots.map { Int($0.count) }.min() ?? 0
        if shortestInfix >= 4 {
            infixStride = shortestInfix - 3
            infixGrams = Array(repeating: 0, count: Self.gramBits / 64)
            for slot in infixSlots {
                for d in 0..<infixStride {
                    let bit = bytes.withUnsafeBufferPointer { Self.gramBit($0.baseAddress! + Int(slot.start) + d) }
                    infixGrams[bit >> 6] |= 1 << UInt64(bit & 63)
                }
            }
        }
        var size = 16
        while size < exact.count * 4 { size *= 2 }
        exactTable = Array(repeating: -1, count: size)
        for slot in exact {
            let h = bytes.withUnsafeBufferPointer { Self.hash($0.baseAddress! + Int(slot.start), Int(slot.count)) }
            var i = Int(truncatingIfNeeded: h) & (size - 1)
            while exactTable[i] >= 0 { i = (i + 1) & (size - 1) }
            exactTable[i] = Int32(exactSlots.count)
            exactSlots.append(slot)
            exactHashes.append(h)
            exactLengths |= 1 << UInt64(min(Int(slot.count), 63))
        }
    }

    /// Bits of ``infixGrams``.
    static let gramBits = 4096

    /// A multiplicative hash of the four bytes at `p`: its top bits pick a prefix bucket
    /// (``bucket(_:)``) or an infix gram (``gramBit(_:)``).
    @inline(__always) static func fourByteHash(_ p: UnsafePointer<UInt8>) -> UInt32 {
        UnsafeRawPointer(p).loadUnaligned(as: UInt32.self) &* 0x9E37_79B1
    }

    /// The bit of ``infixGrams`` for the four bytes at `p`.
    @inline(__always) static func gramBit(_ p: UnsafePointer<UInt8>) -> Int { Int(fourByteHash(p) >> 20) }

    /// Whether the `n` bytes at `t` may hold one of the infixes: false only when they
    /// provably hold none (see ``infixStride``).
    @inline(__always) private func mayHoldInfix(_ t: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        guard infixStride > 0 else { return true }
        return infixGrams.withUnsafeBufferPointer { grams in
            var q = 0
            while q + 4 <= n {
                let bit = Self.gramBit(t + q)
                if grams[bit >> 6] & (1 << UInt64(bit & 63)) != 0 { return true }
                q += infixStride
            }
            return false
        }
    }

    /// One of 256 buckets for the four bytes at `p`.
    @inline(__always) static func bucket(_ p: UnsafePointer<UInt8>) -> Int { Int(fourByteHash(p) >> 24) }

    /// A hash of the `n` bytes at `p`, eight at a time (the table is built with it too).
    @inline(__always) static func hash(_ p: UnsafePointer<UInt8>, _ n: Int) -> UInt64 {
        let raw = UnsafeRawPointer(p)
        var h: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(truncatingIfNeeded: n)
        @inline(__always) func mix(_ w: UInt64) {
            h = (h ^ w) &* 0x9E37_79B9_7F4A_7C15
            h ^= h >> 29
        }
        if n >= 8 {
            var k = 0
            while k + 8 < n {
                mix(raw.loadUnaligned(fromByteOffset: k, as: UInt64.self))
                k += 8
            }
            mix(raw.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self))  // the last eight, overlapping
        } else {
            var w: UInt64 = 0
            for k in 0..<n { w |= UInt64(p[k]) << (8 * k) }
            mix(w)
        }
        return h
    }

    /// The position, among this set's exact names (no `*`) in the order they were given, of
    /// the one `text` is.
    func exactIndex(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Int? {
        let n = text.count
        guard n > 0, exactLengths & (1 << UInt64(min(n, 63))) != 0 else { return nil }
        let t = text.base.baseAddress! + text.startIndex
        return bytes.withUnsafeBufferPointer { p in
            let h = Self.hash(t, n)
            let mask = exactTable.count - 1
            var i = Int(truncatingIfNeeded: h) & mask
            while true {
                let e = Int(exactTable[i])
                if e < 0 { return nil }
                let slot = exactSlots[e]
                if exactHashes[e] == h && Int(slot.count) == n && Bytes.equal(t, p.baseAddress! + Int(slot.start), n) { return e }
                i = (i + 1) & mask
            }
        }
    }

    /// Whether `text` matches a pattern of the set; `exact: false` skips the exact names (for
    /// a caller that already knows `text` is none of them).
    func matches(_ text: Slice<UnsafeBufferPointer<UInt8>>, exact: Bool = true) -> Bool {
        let n = text.count
        guard n > 0 else { return false }
        if exact && exactIndex(text) != nil { return true }
        let t = text.base.baseAddress! + text.startIndex
        return bytes.withUnsafeBufferPointer { all in
            let p = all.baseAddress!
            @inline(__always) func equal(_ slot: Slot, at k: Int) -> Bool { Bytes.equal(t + k, p + Int(slot.start), Int(slot.count)) }
            if n >= 4 {
                let b = Self.bucket(t)
                for e in Int(prefixStart[b])..<Int(prefixStart[b + 1]) {
                    let slot = prefixSlots[e]
                    if n >= Int(slot.count) && equal(slot, at: 0) { return true }
                }
            }
            let first = Int(t[0])
            for e in Int(shortPrefixStart[first])..<Int(shortPrefixStart[first + 1]) {
                let slot = shortPrefixSlots[e]
                if n >= Int(slot.count) && equal(slot, at: 0) { return true }
            }
            for slot in suffixSlots where n >= Int(slot.count) && equal(slot, at: n - Int(slot.count)) { return true }
            for (prefix, suffix) in prefixSuffixSlots
            where n >= Int(prefix.count + suffix.count) && equal(prefix, at: 0) && equal(suffix, at: n - Int(suffix.count)) {
                return true
            }
            if !infixSlots.isEmpty && mayHoldInfix(t, n) {
                // One scan: at each byte, only the infixes that start with it.
                for i in 0..<n {
                    let b = Int(t[i])
                    for e in Int(infixStart[b])..<Int(infixStart[b + 1]) {
                        let slot = infixSlots[e]
                        if n - i >= Int(slot.count) && equal(slot, at: i) { return true }
                    }
                }
            }
            return false
        }
    }
}
