import Foundation
import Testing

@testable import CrashIngest

@Suite struct JSONTextTests {
    /// The byte-at-a-time definition that ``JSONText/endOfPlainText(_:from:stoppingAtNonASCII:)``
    /// computes eight bytes at a time.
    private func naive(_ bytes: [UInt8], from start: Int, stoppingAtNonASCII: Bool) -> Int {
        bytes[start...].firstIndex { $0 == 0x22 || $0 == 0x5C || $0 < 0x20 || (stoppingAtNonASCII && $0 >= 0x80) }
            ?? bytes.count
    }

    /// Every byte value at every position of a word and its tail, from every start, both modes;
    /// then two special bytes in one word (the first wins, whatever borrows the second causes).
    @Test func endOfPlainTextFindsTheFirstByteThatNeedsAttention() {
        for length in [0, 1, 7, 8, 9, 17, 24] {
            for special in 0...255 {
                for position in 0..<max(length, 1) where position < length || length == 0 {
                    var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    if length > 0 { bytes[position] = UInt8(special) }
                    for start in [0, 1, 3].filter({ $0 <= length }) {
                        for mode in [false, true] {
                            let fast = bytes.withUnsafeBufferPointer {
                                JSONText.endOfPlainText($0, from: start, stoppingAtNonASCII: mode)
                            }
                            let expected = naive(bytes, from: start, stoppingAtNonASCII: mode)
                            if fast != expected {
                                Issue.record(
                                    "length \(length), byte \(special) at \(position), start \(start), non-ASCII \(mode): \(fast) != \(expected)")
                                return
                            }
                        }
                    }
                }
            }
        }
        for first in [0x00, 0x1F, 0x22, 0x5C, 0x80, 0xFF] {
            for second in [0x00, 0x1F, 0x22, 0x5C, 0x80, 0xFF] {
                for (a, b) in [(0, 1), (2, 7), (3, 4), (6, 7)] {
                    var bytes = [UInt8](repeating: UInt8(ascii: "z"), count: 16)
                    bytes[a] = UInt8(first)
                    bytes[b] = UInt8(second)
                    for mode in [false, true] {
                        let fast = bytes.withUnsafeBufferPointer { JSONText.endOfPlainText($0, from: 0, stoppingAtNonASCII: mode) }
                        #expect(fast == naive(bytes, from: 0, stoppingAtNonASCII: mode), "\(first) at \(a), \(second) at \(b)")
                    }
                }
            }
        }
    }
}

@Suite struct ReportIDTests {
    /// The RFC 9562 text form: 8-4-4-4-12 hexadecimal digits.
    private func isCanonical(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard b.count == 36 else { return false }
        return b.indices.allSatisfy { i in
            [8, 13, 18, 23].contains(i) ? b[i] == 0x2D : (b[i] >= 0x30 && b[i] <= 0x39) || (b[i] | 0x20 >= 0x61 && b[i] | 0x20 <= 0x66)
        }
    }

    /// The reader's own UUID parser reads what `UUID(uuidString:)` reads, value included, and
    /// refuses what that parser lets through by `sscanf`'s leniency (a sign or a space in place
    /// of a digit: `-3` reads as the byte 0xFD there).
    @Test func idsParseAsFoundationParsesThem() {
        let valid = UUID().uuidString
        var cases = [
            valid, valid.lowercased(), "6f9619ff-8B86-D011-b42d-00C04FC964FF", "", "x", "{\(valid)}",
            String(valid.dropLast()), valid + "0", valid.replacingOccurrences(of: "-", with: ""),
            "6F9619FF8B86-D011-B42D-00C04FC964FF-", "6F9619FF-8B86-D011-B42D-00C04FC964FG", "6F9619FF-8B86-D011-B42D 00C04FC964FF",
            "6F9619FF-8B86-D011-B42D-00C04FC964F\u{E9}", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ]
        // Every byte value in every position of an otherwise valid id.
        let template = Array(valid.utf8)
        for position in 0..<template.count {
            for byte in [0x00, 0x2D, 0x2F, 0x30, 0x39, 0x3A, 0x40, 0x41, 0x46, 0x47, 0x60, 0x61, 0x66, 0x67, 0x7F] {
                var bytes = template
                bytes[position] = UInt8(byte)
                cases.append(String(decoding: bytes, as: UTF8.self))
            }
        }
        var lenient = 0
        for text in cases {
            let expected = isCanonical(text) ? UUID(uuidString: text) : nil
            if isCanonical(text) { #expect(expected != nil, "\(text.debugDescription)") }
            if expected == nil, UUID(uuidString: text) != nil { lenient += 1 }
            #expect(ReportReader.uuid(text) == expected, "\(text.debugDescription)")
        }
        #expect(lenient > 0)  // the cases include what Foundation lets through
    }
}
