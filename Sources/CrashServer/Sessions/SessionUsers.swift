import NIOCore

/// The distinct users of a rollup row or of a release in a window: their hashes while there
/// are at most ``exactLimit``, a ``UserSketch`` beyond (release-health.md: `users` exact up to
/// 250 per release and window, within 2 % beyond).
///
/// Stored as one `bytea` (``encoded``), a tag byte and then:
/// - `0`: the hashes, 8 bytes each, big-endian;
/// - `1`: a sparse sketch, `(register: UInt16 big-endian, rank: UInt8)` per non-zero register;
/// - `2`: a dense sketch, the 16,384 ranks.
///
/// Merging is a union (hashes) or a register-wise maximum (sketches): idempotent, so a row
/// merged into another twice still counts each user once.
struct SessionUsers: Sendable, Equatable {
    static let exactLimit = 250

    private enum Storage: Sendable, Equatable {
        case exact(Set<Int64>)
        case sketch(UserSketch)
    }

    private var storage: Storage = .exact([])

    init() {}

    init(_ hashes: some Sequence<Int64>) {
        for hash in hashes { insert(hash) }
    }

    init(encoded bytes: ByteBuffer) {
        merge(encoded: bytes)
    }

    var isEmpty: Bool {
        if case .exact(let hashes) = storage { return hashes.isEmpty }
        return false
    }

    var isSketch: Bool {
        if case .sketch = storage { return true }
        return false
    }

    /// The memory the set holds, about (a cache's budget).
    var storedBytes: Int {
        switch storage {
        case .exact(let hashes): hashes.count * 16
        case .sketch: UserSketch.registerCount
        }
    }

    /// Exact while at most 250 users, else the sketch's estimate.
    var count: Int64 {
        switch storage {
        case .exact(let hashes): Int64(hashes.count)
        case .sketch(let sketch): sketch.estimate
        }
    }

    mutating func insert(_ hash: Int64) {
        switch storage {
        case .exact(var hashes):
            storage = .exact([])
            hashes.insert(hash)
            storage = hashes.count > Self.exactLimit ? .sketch(UserSketch(hashes)) : .exact(hashes)
        case .sketch(var sketch):
            storage = .exact([])
            sketch.insert(hash)
            storage = .sketch(sketch)
        }
    }

    mutating func merge(_ other: SessionUsers) {
        switch other.storage {
        case .exact(let hashes): for hash in hashes { insert(hash) }
        case .sketch(let sketch): mergeSketch { $0.merge(sketch) }
        }
    }

    /// Merges a stored set (``encoded``); bytes it cannot read are ignored. (A query merges
    /// thousands of these: the loops read the bytes in place.)
    mutating func merge(encoded bytes: ByteBuffer) {
        bytes.withUnsafeReadableBytes { raw in
            guard let tag = raw.first else { return }
            let body = UnsafeRawBufferPointer(rebasing: raw.dropFirst())
            switch tag {
            case 0:
                var i = 0
                while i + 8 <= body.count {
                    insert(Int64(bitPattern: UInt64(bigEndian: body.loadUnaligned(fromByteOffset: i, as: UInt64.self))))
                    i += 8
                }
            case 1:
                mergeSketch { sketch in
                    sketch.registers.withUnsafeMutableBufferPointer { registers in
                        var i = 0
                        while i + 3 <= body.count {
                            let index = Int(body[i]) << 8 | Int(body[i + 1])
                            let rank = body[i + 2]
                            if index < registers.count, registers[index] < rank { registers[index] = rank }
                            i += 3
                        }
                    }
                }
            case 2:
                guard body.count == UserSketch.registerCount else { return }
                mergeSketch { $0.merge(dense: body) }
            default:
                return
            }
        }
    }

    private mutating func mergeSketch(_ body: (inout UserSketch) -> Void) {
        var sketch: UserSketch
        switch storage {
        case .exact(let hashes): sketch = UserSketch(hashes)
        case .sketch(let existing): sketch = existing
        }
        storage = .exact([])
        body(&sketch)
        storage = .sketch(sketch)
    }

    /// The stored form: the hashes (sorted, so equal sets store equal bytes), or the sketch,
    /// sparse while that is smaller than dense.
    var encoded: ByteBuffer {
        var out = ByteBuffer()
        switch storage {
        case .exact(let hashes):
            out.reserveCapacity(1 + hashes.count * 8)
            out.writeInteger(UInt8(0))
            for hash in hashes.sorted() { out.writeInteger(hash, endianness: .big) }
        case .sketch(let sketch):
            let registers = sketch.registers
            let nonZero = registers.reduce(0) { $0 + ($1 > 0 ? 1 : 0) }
            if nonZero * 3 < registers.count {
                out.reserveCapacity(1 + nonZero * 3)
                out.writeInteger(UInt8(1))
                for (index, rank) in registers.enumerated() where rank > 0 {
                    out.writeInteger(UInt16(index), endianness: .big)
                    out.writeInteger(rank)
                }
            } else {
                out.reserveCapacity(1 + registers.count)
                out.writeInteger(UInt8(2))
                out.writeBytes(registers)
            }
        }
        return out
    }
}

extension UserSketch {
    init(_ hashes: some Sequence<Int64>) {
        self.init()
        for hash in hashes { insert(hash) }
    }

    /// Register-wise maximum with another sketch.
    mutating func merge(_ other: UserSketch) {
        other.registers.withUnsafeBytes { merge(dense: $0) }
    }

    /// Register-wise maximum with 16,384 ranks (a dense stored sketch). An unconditional
    /// `max` store over unchecked buffers, which the optimizer turns into vector maxima: a
    /// releases list merges hundreds of sketches per request.
    mutating func merge(dense ranks: UnsafeRawBufferPointer) {
        guard ranks.count == Self.registerCount, let base = ranks.baseAddress else { return }
        let theirs = UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: Self.registerCount)
        registers.withUnsafeMutableBufferPointer { mine in
            for i in 0..<Self.registerCount { mine[i] = max(mine[i], theirs[i]) }
        }
    }
}
