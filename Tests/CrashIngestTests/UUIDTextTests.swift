import Foundation
import Testing

@testable import CrashIngest

/// The one strict UUID reader of both ingest doors (`/v1/reports` ids, Sentry `event_id`s),
/// against Foundation's `UUID(uuidString:)` on the same text.
@Suite struct UUIDTextTests {
    private static func isHex(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x66) }

    /// The RFC 9562 text form: 8-4-4-4-12 hexadecimal digits.
    private static func isCanonical(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard b.count == 36 else { return false }
        return b.indices.allSatisfy { i in [8, 13, 18, 23].contains(i) ? b[i] == 0x2D : isHex(b[i]) }
    }

    /// Sentry's form: the 32 digits without hyphens.
    private static func isCompact(_ text: String) -> Bool { text.utf8.count == 32 && text.utf8.allSatisfy(isHex) }

    /// The hyphenated text of 32 digits, for Foundation to read.
    private static func hyphenated(_ text: String) -> String {
        let b = Array(text.utf8)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(decoding: b[$0], as: UTF8.self) }.joined(separator: "-")
    }

    /// Ids, odd texts, and every byte value in every position of an otherwise valid id; each
    /// also without its hyphens.
    private static let cases: [String] = {
        let valid = UUID().uuidString
        var cases = [
            valid, valid.lowercased(), "6f9619ff-8B86-D011-b42d-00C04FC964FF", "", "x", "{\(valid)}", "urn:uuid:\(valid)",
            String(valid.dropLast()), valid + "0", " \(valid)", "6F9619FF8B86-D011-B42D-00C04FC964FF-",
            "6F9619FF-8B86-D011-B42D-00C04FC964FG", "6F9619FF-8B86-D011-B42D 00C04FC964FF",
            "6F9619FF-8B86-D011-B42D-00C04FC964F\u{E9}", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ]
        let template = Array(valid.utf8)
        for position in 0..<template.count {
            for byte in [0x00, 0x20, 0x2B, 0x2D, 0x2F, 0x30, 0x39, 0x3A, 0x40, 0x41, 0x46, 0x47, 0x60, 0x61, 0x66, 0x67, 0x7F] {
                var bytes = template
                bytes[position] = UInt8(byte)
                cases.append(String(decoding: bytes, as: UTF8.self))
            }
        }
        return cases + cases.map { $0.replacingOccurrences(of: "-", with: "") }
    }()

    /// The hyphenated form reads as Foundation reads it, value included, and what Foundation
    /// lets through by `sscanf`'s leniency is refused (a sign or a space in place of a digit:
    /// `-3` reads as the byte 0xFD there). The compact form is refused unless asked for.
    @Test func hyphenatedFormOnly() {
        var lenient = 0
        for text in Self.cases {
            let expected = Self.isCanonical(text) ? UUID(uuidString: text) : nil
            if Self.isCanonical(text) { #expect(expected != nil, "\(text.debugDescription)") }
            if expected == nil, UUID(uuidString: text) != nil { lenient += 1 }
            #expect(UUIDText.parse(text) == expected, "\(text.debugDescription)")
        }
        #expect(lenient > 0)  // the cases include what Foundation lets through
    }

    /// With `compact`, 32 digits also read, as their hyphenated text does; nothing else is added.
    @Test func compactFormToo() {
        var compact = 0
        for text in Self.cases {
            let expected: UUID? =
                if Self.isCanonical(text) { UUID(uuidString: text) } else if Self.isCompact(text) { UUID(uuidString: Self.hyphenated(text)) } else {
                    nil
                }
            if Self.isCompact(text) {
                compact += 1
                #expect(expected != nil, "\(text.debugDescription)")
            }
            #expect(UUIDText.parse(text, compact: true) == expected, "\(text.debugDescription)")
        }
        #expect(compact > 100)
    }
}
