import Crypto
import Foundation

/// A HyperLogLog sketch of device ids (1,024 six-bit registers, standard error about 3 %):
/// the `devices` of large groups is estimated from these instead of counting distinct ids
/// over their raw reports.
///
/// Stored per group, version and hour or day (`group_version_hourly`, `group_version_daily`) as a
/// sparse list of `(register: UInt16 big-endian, rank: UInt8)` sorted by register, so a
/// group seen on a few devices costs a few bytes. The register of a device id is defined
/// in SQL too (`crashguard_device_register`, used by `crash-bench seed`); a test checks that
/// both agree.
struct DeviceSketch: Equatable, Sendable {
    /// log2 of the register count.
    static let precision = 10
    static let registerCount = 1 << precision

    private(set) var registers: [UInt8]

    /// An empty sketch.
    init() {
        registers = [UInt8](repeating: 0, count: Self.registerCount)
    }

    /// Decodes the stored form; bytes that do not form whole entries are ignored.
    init(encoded bytes: some Collection<UInt8>) {
        self.init()
        merge(encoded: bytes)
    }

    /// The register and rank of one device id: the first 64 bits of its SHA-256, the top
    /// 10 bits choosing the register, the rank being one more than the leading zeros of the
    /// other 54 (55 when they are all zero).
    static func register(for deviceID: String) -> (index: Int, rank: UInt8) {
        let digest = SHA256.hash(data: Array(deviceID.utf8))
        var hash: UInt64 = 0
        for (i, byte) in digest.enumerated() where i < 8 { hash = hash << 8 | UInt64(byte) }
        let index = Int(hash >> UInt64(64 - precision))
        let rest = hash << UInt64(precision)
        let rank = rest == 0 ? UInt8(64 - precision + 1) : UInt8(rest.leadingZeroBitCount + 1)
        return (index, rank)
    }

    /// Adds one device id.
    mutating func insert(_ deviceID: String) {
        let (index, rank) = Self.register(for: deviceID)
        if registers[index] < rank { registers[index] = rank }
    }

    /// Register-wise maximum with another sketch in stored form (or several concatenated:
    /// the entries may come in any order).
    mutating func merge(encoded bytes: some Collection<UInt8>) {
        let merged: Void? = bytes.withContiguousStorageIfAvailable { Self.merge($0, into: &registers) }
        if merged == nil { Array(bytes).withUnsafeBufferPointer { Self.merge($0, into: &registers) } }
    }

    private static func merge(_ bytes: UnsafeBufferPointer<UInt8>, into registers: inout [UInt8]) {
        registers.withUnsafeMutableBufferPointer { registers in
            var i = 0
            while i + 2 < bytes.count {
                let index = Int(bytes[i]) << 8 | Int(bytes[i + 1])
                let rank = bytes[i + 2]
                if index < registers.count && registers[index] < rank { registers[index] = rank }
                i += 3
            }
        }
    }

    /// The stored form: non-zero registers only.
    var encoded: [UInt8] {
        var out: [UInt8] = []
        for (i, rank) in registers.enumerated() where rank > 0 { Self.appendEntry(&out, i, rank) }
        return out
    }

    /// Merges register updates into a sketch in stored form, without decoding it: nil when
    /// no register grows (ingest then leaves the stored sketch as it is).
    static func merging(stored: [UInt8], updates: [(index: Int, rank: UInt8)]) -> [UInt8]? {
        // By register, the highest rank first within one: the first of each register is its best
        // (sorted rather than hashed: a batch brings a key a few updates, ingest merges many keys).
        let best = updates.sorted { $0.index != $1.index ? $0.index < $1.index : $0.rank > $1.rank }
        var out: [UInt8] = []
        out.reserveCapacity(stored.count + best.count * 3)
        var grew = false
        var i = 0
        var previous = -1
        func storedIndex() -> Int? { i + 2 < stored.count ? Int(stored[i]) << 8 | Int(stored[i + 1]) : nil }
        for (index, rank) in best where index != previous {
            previous = index
            while let s = storedIndex(), s < index {
                out.append(contentsOf: stored[i..<i + 3])
                i += 3
            }
            if storedIndex() == index {
                if stored[i + 2] < rank { grew = true }
                appendEntry(&out, index, max(stored[i + 2], rank))
                i += 3
            } else {
                grew = true
                appendEntry(&out, index, rank)
            }
        }
        while storedIndex() != nil {
            out.append(contentsOf: stored[i..<i + 3])
            i += 3
        }
        return grew ? out : nil
    }

    /// One entry of the stored form: register (big-endian) and rank.
    private static func appendEntry(_ out: inout [UInt8], _ index: Int, _ rank: UInt8) {
        out.append(UInt8(index >> 8))
        out.append(UInt8(index & 0xFF))
        out.append(rank)
    }

    /// The estimated number of distinct device ids: HyperLogLog with linear counting while
    /// registers are still empty (which is near exact for small sets).
    var estimate: Int64 { HyperLogLog.estimate(registers) }
}
