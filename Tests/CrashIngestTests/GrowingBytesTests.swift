import SeededRandom
import Testing

@testable import CrashIngest

/// The buffer the ingest reader keeps a body in: whatever the pieces and however often it
/// grows (from nothing, through glibc's heap, to blocks mapped on their own), it holds exactly
/// the bytes appended, in order.
@Suite struct GrowingBytesTests {
    @Test func holdsWhatWasAppendedAcrossGrowths() {
        var rng = SplitMix64(seed: 20)
        var bytes = GrowingBytes()
        var expected: [UInt8] = []
        // Pieces from empty to 300 KiB: the buffer grows from 4 KiB past glibc's 256 KiB
        // mmap threshold to about 8 MiB.
        while expected.count < 8 << 20 {
            let size = expected.count % 5 == 0 ? Int(rng.next() % 300_000) : Int(rng.next() % 3_000)
            let piece = (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            piece.withUnsafeBufferPointer { bytes.append(contentsOf: $0) }
            expected += piece
            #expect(bytes.count == expected.count)
        }
        bytes.withUnsafeBufferPointer { #expect(Array($0) == expected) }
        let start = expected.count / 3
        #expect(bytes[start..<start + 70_000] == Array(expected[start..<start + 70_000]))
        #expect(bytes[expected.count..<expected.count] == [])
    }

    @Test func emptyIsEmpty() {
        var bytes = GrowingBytes()
        bytes.withUnsafeBufferPointer { #expect($0.isEmpty) }
        [UInt8]().withUnsafeBufferPointer { bytes.append(contentsOf: $0) }
        #expect(bytes.count == 0)
        #expect(bytes[0..<0] == [])
    }
}
