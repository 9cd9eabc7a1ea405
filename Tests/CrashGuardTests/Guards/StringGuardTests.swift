import CrashGuard
import CrashWire
import Foundation
import Testing

@Suite("string guard")
struct StringGuardTests {
    @Test func unguardedStringIndexDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            let s = runtimeOpaque("abc")
            _ = s[s.index(s.startIndex, offsetBy: runtimeOpaque(5))]
        }
    }

    @Test func unguardedNSStringSubstringDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            _ = NSString(string: "abc").substring(with: NSRange(location: 2, length: runtimeOpaque(5)))
        }
    }

    @Test func characterAtOffset() {
        let (value, events) = recording { "héllo".guardedCharacter(at: 9) }
        #expect(value == nil)
        expectOne(events, .string, "-[String characterAtIndex:]: Index 9 out of bounds; string length 5")
        #expect("héllo".guardedCharacter(at: 1) == "é")
    }

    @Test func substringClamps() {
        let (value, events) = recording { "abcdefg".guardedSubstring(5..<15) }
        #expect(value == "fg")
        expectOne(events, .string, "-[String substringWithRange:]: Range {5, 10} out of bounds; string length 7")
        let inside = recording { "abcdefg".guardedSubstring(1..<3) }
        #expect(inside.value == "bc" && inside.events.isEmpty)
        #expect(recording { "abc".guardedSubstring(7..<9) }.value == "")
    }

    @Test func substringFromAndTo() {
        let from = recording { "abc".guardedSubstring(from: 9) }
        #expect(from.value == "")
        expectOne(from.events, .string, "-[String substringFromIndex:]: Index 9 out of bounds; string length 3")
        let to = recording { "abc".guardedSubstring(to: 9) }
        #expect(to.value == "abc")
        expectOne(to.events, .string, "-[String substringToIndex:]: Index 9 out of bounds; string length 3")
        let negative = recording { "abc".guardedSubstring(from: -2) }
        #expect(negative.value == "abc" && negative.events.count == 1)
    }

    @Test func nsRangeConversion() {
        let text = "a😀bc"  // UTF-16: a, 😀 (2 units), b, c = 5
        let (range, events) = recording { text.guardedRange(NSRange(location: 3, length: 10)) }
        #expect(text[range] == "bc")
        expectOne(events, .string, "-[String rangeOfNSRange:]: Range {3, 10} out of bounds; string length 5")
        let inside = recording { text.guardedRange(NSRange(location: 1, length: 2)) }
        #expect(text[inside.value] == "😀" && inside.events.isEmpty)
        // A range splitting the surrogate pair is widened to the whole character.
        #expect(text[text.guardedRange(NSRange(location: 2, length: 1))] == "😀")
    }

    @Test func nsStringSubstrings() {
        let string = NSString(string: "abcdefg")
        let name = String(describing: type(of: string))
        let (value, events) = recording { string.guardedSubstring(with: NSRange(location: 5, length: 10)) }
        #expect(value == "fg")
        expectOne(events, .string, "-[\(name) substringWithRange:]: Range {5, 10} out of bounds; string length 7")
        expectOne(
            recording { string.guardedSubstring(from: 8) }.events, .string, "-[\(name) substringFromIndex:]: Index 8 out of bounds; string length 7")
        #expect(recording { string.guardedSubstring(to: 8) }.value == "abcdefg")
        let char = recording { string.guardedCharacter(at: 7) }
        #expect(char.value == nil)
        expectOne(char.events, .string, "-[\(name) characterAtIndex:]: Range or index out of bounds")
        #expect(recording { string.guardedSubstring(with: NSRange(location: 1, length: 2)) }.events.isEmpty)
    }
}
