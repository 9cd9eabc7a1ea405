import CrashGuard
import CrashWire
import Foundation
import Testing

@Suite("arithmetic guard")
struct ArithmeticGuardTests {
    @Test func unguardedOverflowDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = Int.max + runtimeOpaque(1) }
    }

    @Test func unguardedDivisionByZeroDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = 7 / runtimeOpaque(0) }
    }

    @Test func unguardedFloatConversionDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = Int(runtimeOpaque(Double.nan)) }
    }

    @Test func overflowSaturates() {
        let (value, events) = recording { Int.max.guardedAdding(1) }
        #expect(value == .max)
        let event = expectOne(events, .arithmetic, "Swift runtime failure: arithmetic overflow (Int: 9223372036854775807 + 1)")
        #expect(event?.context["action"] == "answered 9223372036854775807")
        #expect(recording { Int8.min.guardedSubtracting(1) }.value == .min)
        #expect(recording { Int8(100).guardedMultiplied(by: -2) }.value == .min)
        #expect(recording { UInt8(200).guardedMultiplied(by: 2) }.value == .max)
        #expect(recording { UInt(0).guardedSubtracting(1) }.value == 0)
        let negation = recording { Int32.min.guardedNegated() }
        #expect(negation.value == .max)
        expectOne(negation.events, .arithmetic, "Swift runtime failure: arithmetic overflow (Int32: -(-2147483648))")
        let fine = recording { (2.guardedAdding(3), 2.guardedSubtracting(3), 4.guardedMultiplied(by: -2), 7.guardedNegated()) }
        #expect(fine.value == (5, -1, -8, -7) && fine.events.isEmpty)
    }

    @Test func divisionByZeroAnswersZero() {
        let (value, events) = recording { 7.guardedDivided(by: 0) }
        #expect(value == 0)
        expectOne(events, .arithmetic, "Swift runtime failure: Division by zero (Int: 7 / 0)")
        let remainder = recording { 7.guardedRemainder(dividingBy: 0) }
        #expect(remainder.value == 0)
        expectOne(remainder.events, .arithmetic, "Swift runtime failure: Division by zero in remainder operation (Int: 7 % 0)")
        let overflow = recording { (Int.min.guardedDivided(by: -1), Int.min.guardedRemainder(dividingBy: -1)) }
        #expect(overflow.value == (.max, 0) && overflow.events.count == 2)
        #expect(recording { (7.guardedDivided(by: 2), 7.guardedRemainder(dividingBy: 2)) }.value == (3, 1))
    }

    @Test func floatConversions() {
        let nan = recording { Int(guarding: Double.nan) }
        #expect(nan.value == 0)
        expectOne(nan.events, .arithmetic, "Double value cannot be converted to Int because it is either infinite or NaN")
        let huge = recording { Int(guarding: 1e300) }
        #expect(huge.value == .max)
        expectOne(huge.events, .arithmetic, "Double value cannot be converted to Int because the result would be greater than Int.max")
        let small = recording { UInt8(guarding: Float(-3.5)) }
        #expect(small.value == 0)
        expectOne(small.events, .arithmetic, "Float value cannot be converted to UInt8 because the result would be less than UInt8.min")
        #expect(recording { Int(guarding: -Double.infinity) }.value == .min)
        let fine = recording { (Int(guarding: 2.9), Int(guarding: -2.9), Int8(guarding: 127.5)) }
        #expect(fine.value == (2, -2, 127) && fine.events.isEmpty)
    }
}
