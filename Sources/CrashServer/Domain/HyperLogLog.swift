import Foundation

/// The HyperLogLog estimate shared by the sketches of distinct devices (``DeviceSketch``) and
/// distinct users (release health's `UserSketch`).
enum HyperLogLog {
    /// The estimated number of distinct items behind `registers` (each the highest rank seen
    /// in it): HyperLogLog, with linear counting while registers are still empty (near exact
    /// for small sets).
    /// 2^-rank for every rank a register can hold (exact in a `Double`): a table lookup instead
    /// of a division per register, since a releases list estimates dozens of sketches.
    private static let inversePowers: [Double] = (0...255).map { 1 / pow(2, Double($0)) }

    static func estimate(_ registers: [UInt8]) -> Int64 {
        let m = Double(registers.count)
        var sum = 0.0
        var zeros = 0
        for rank in registers {
            if rank == 0 { zeros += 1 }
            sum += inversePowers[Int(rank)]
        }
        let alpha = 0.7213 / (1 + 1.079 / m)
        let raw = alpha * m * m / sum
        if raw <= 2.5 * m && zeros > 0 { return Int64((m * log(m / Double(zeros))).rounded()) }
        return Int64(raw.rounded())
    }
}
