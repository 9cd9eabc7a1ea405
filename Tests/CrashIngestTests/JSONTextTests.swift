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
