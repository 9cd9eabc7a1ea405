import Foundation

/// The HyperLogLog estimate shared by the sketches of distinct devices (``DeviceSketch``) and
/// distinct users (release health's `UserSketch`).
enum HyperLogLog {
    /// 2^-rank for every rank a register can hold (exact in a `Double`).
    private static let inversePowers: [Double] = (0...255).map { 1 / pow(2, Double($0)) }

    /// The largest rank whose 2^-rank ``estimate`` sums in fixed point: 2^(38 - rank) per
    /// register, at most 2^14 registers, stays below 2^53, so the sum is exact as a `Double`.
    static let fixedPointRanks = 38

    /// The estimated number of distinct items behind `registers` (each the highest rank seen
    /// in it): HyperLogLog, with linear counting while registers are still empty (near exact
    /// for small sets).
    static func estimate(_ registers: [UInt8]) -> Int64 {
        let m = Double(registers.count)
        // A releases list estimates dozens of sketches: integer adds of 2^(38 - rank) instead of
        // a chain of floating-point adds. Each partial sum of the loop below is then a multiple
        // of 2^-38 under 2^15, exact in a `Double` too, so both give the same sum; a register
        // ranked higher (about one in 2^38 hashes) takes the floating-point loop.
        var fixed: UInt64 = 0
        var zeros = 0
        var highest: UInt8 = 0
        registers.withUnsafeBufferPointer { ranks in
            for rank in ranks {
                highest = max(highest, rank)
                zeros &+= rank == 0 ? 1 : 0
                fixed &+= UInt64(1) << UInt64(UInt8(fixedPointRanks) &- min(rank, UInt8(fixedPointRanks)))
            }
        }
        var sum = Double(fixed) / Double(UInt64(1) << UInt64(fixedPointRanks))
        if highest > fixedPointRanks || registers.count > 1 << 14 {
            sum = 0
            for rank in registers { sum += inversePowers[Int(rank)] }
        }
        let alpha = 0.7213 / (1 + 1.079 / m)
        let raw = alpha * m * m / sum
        if raw <= 2.5 * m && zeros > 0 { return Int64((m * log(m / Double(zeros))).rounded()) }
        return Int64(raw.rounded())
    }
}
