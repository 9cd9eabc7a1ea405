import CrashWire
import Foundation

// Arithmetic guard (kind `arithmetic`): integer operations and float-to-integer
// conversions that trap in Swift (SIGILL on Linux x86_64), answered with a documented
// value and recorded. Reasons carry the type and the operands (the server's normalizer
// turns the numbers into `<n>`, so one bug is one group):
// `Swift runtime failure: arithmetic overflow (Int: 9223372036854775807 + 1)`.
//
// | operation | traps on | guarded answer |
// | --- | --- | --- |
// | `guardedAdding`, `guardedSubtracting`, `guardedMultiplied(by:)`, `guardedNegated()` | overflow | the bound in the direction of the true result (saturation: `Int.max` or `Int.min`) |
// | `guardedDivided(by:)` | division by zero / `min / -1` | `0` / `max` |
// | `guardedRemainder(dividingBy:)` | division by zero / `min % -1` | `0` / `0` (the true remainder) |
// | `Int(guarding: Double)` | NaN / infinite / out of range | `0` / `max` or `min` (saturation), fractions truncated toward zero as `Int(_:)` does |

enum ArithmeticReason {
    static func record(_ reason: @autoclosure () -> String, answer: String, site: CallSite) {
        GuardRecorder.record(.arithmetic, site: site, in: nil, reason: reason(), context: ["action": "answered \(answer)"])
    }
}

extension FixedWidthInteger {
    private func overflow(_ op: String, _ rhs: Self, answer: Self, _ site: CallSite) -> Self {
        ArithmeticReason.record(
            "Swift runtime failure: arithmetic overflow (\(Self.self): \(self) \(op) \(rhs))",
            answer: "\(answer)", site: site
        )
        return answer
    }

    /// `self + rhs`, or on overflow the saturated bound (recorded).
    public func guardedAdding(_ rhs: Self, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let (value, overflowed) = addingReportingOverflow(rhs)
        if !overflowed { return value }
        return overflow("+", rhs, answer: rhs > 0 ? .max : .min, CallSite(fileID: fileID, line: line, function: function))
    }

    /// `self - rhs`, or on overflow the saturated bound (recorded).
    public func guardedSubtracting(_ rhs: Self, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let (value, overflowed) = subtractingReportingOverflow(rhs)
        if !overflowed { return value }
        return overflow("-", rhs, answer: rhs > 0 ? .min : .max, CallSite(fileID: fileID, line: line, function: function))
    }

    /// `self * rhs`, or on overflow the saturated bound (recorded).
    public func guardedMultiplied(by rhs: Self, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let (value, overflowed) = multipliedReportingOverflow(by: rhs)
        if !overflowed { return value }
        let negative = (self < 0) != (rhs < 0)
        return overflow("*", rhs, answer: negative ? .min : .max, CallSite(fileID: fileID, line: line, function: function))
    }

    /// `self / rhs`; dividing by zero answers `0`, `min / -1` answers `max` (recorded).
    public func guardedDivided(by rhs: Self, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let site = CallSite(fileID: fileID, line: line, function: function)
        if rhs == 0 {
            ArithmeticReason.record("Swift runtime failure: Division by zero (\(Self.self): \(self) / 0)", answer: "0", site: site)
            return 0
        }
        let (value, overflowed) = dividedReportingOverflow(by: rhs)
        if !overflowed { return value }
        return overflow("/", rhs, answer: .max, site)
    }

    /// `self % rhs`; by zero answers `0`, `min % -1` answers `0` (recorded).
    public func guardedRemainder(dividingBy rhs: Self, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let site = CallSite(fileID: fileID, line: line, function: function)
        if rhs == 0 {
            ArithmeticReason.record(
                "Swift runtime failure: Division by zero in remainder operation (\(Self.self): \(self) % 0)", answer: "0", site: site)
            return 0
        }
        let (value, overflowed) = remainderReportingOverflow(dividingBy: rhs)
        if !overflowed { return value }
        ArithmeticReason.record(
            "Swift runtime failure: Division results in an overflow in remainder operation (\(Self.self): \(self) % \(rhs))", answer: "0", site: site)
        return 0
    }

    /// `-self`, or for `min` of a signed type `max` (recorded).
    public func guardedNegated(fileID: String = #fileID, line: Int = #line, function: String = #function) -> Self {
        let (value, overflowed) = Self.zero.subtractingReportingOverflow(self)
        if !overflowed { return value }
        let answer: Self = Self.isSigned ? .max : 0
        ArithmeticReason.record(
            "Swift runtime failure: arithmetic overflow (\(Self.self): -(\(self)))", answer: "\(answer)",
            site: CallSite(fileID: fileID, line: line, function: function))
        return answer
    }

    /// `Self(value)` (truncating toward zero), except that NaN answers `0` and infinite or
    /// out-of-range values answer `max` or `min` (recorded, with the Swift runtime's
    /// message: `Double value cannot be converted to Int because it is either infinite or NaN`,
    /// `... because the result would be greater than Int.max`).
    public init<Source: BinaryFloatingPoint>(
        guarding value: Source, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        if let exact = Self(exactly: value.rounded(.towardZero)) {
            self = exact
            return
        }
        let site = CallSite(fileID: fileID, line: line, function: function)
        let answer: Self
        let why: String
        if value.isNaN || value.isInfinite {
            answer = value.isNaN ? 0 : (value > 0 ? .max : .min)
            why = "it is either infinite or NaN"
        } else if value > 0 {
            answer = .max
            why = "the result would be greater than \(Self.self).max"
        } else {
            answer = .min
            why = "the result would be less than \(Self.self).min"
        }
        ArithmeticReason.record(
            "\(Source.self) value cannot be converted to \(Self.self) because \(why)",
            answer: "\(answer)", site: site
        )
        self = answer
    }
}
