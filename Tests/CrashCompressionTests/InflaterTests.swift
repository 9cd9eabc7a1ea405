import CrashCompression
import Testing

@Suite struct InflaterTests {
    let text = Array(String(repeating: "{\"reports\":[]} crash guard ", count: 500).utf8)

    @Test(arguments: [CompressionFormat.gzip, .deflate])
    func roundTrips(_ format: CompressionFormat) throws {
        let packed = try Deflater.compress(text, format: format)
        #expect(packed.count < text.count)
        #expect(try Inflater.inflate(packed, format: format, maxOutputBytes: 1 << 20) == text)
    }

    @Test func streamsInSmallChunks() throws {
        let packed = try Deflater.compress(text, format: .gzip)
        let inflater = try Inflater(format: .gzip, maxOutputBytes: 1 << 20)
        for start in stride(from: 0, to: packed.count, by: 7) {
            try inflater.feed(Array(packed[start..<min(start + 7, packed.count)]))
        }
        #expect(try inflater.finish() == text)
    }

    /// `deflate` bodies may be a zlib stream or raw deflate (the contract): told apart by the
    /// first two bytes, however the body is split into chunks.
    @Test(arguments: [1, 2, 3, 1 << 20])
    func acceptsRawDeflate(_ chunkSize: Int) throws {
        let zlib = try Deflater.compress(text, format: .deflate)
        let raw = Array(zlib.dropFirst(2).dropLast(4))
        for packed in [zlib, raw] {
            let inflater = try Inflater(format: .deflate, maxOutputBytes: 1 << 20)
            for start in stride(from: 0, to: packed.count, by: chunkSize) {
                try inflater.feed(Array(packed[start..<min(start + chunkSize, packed.count)]))
            }
            #expect(try inflater.finish() == text)
        }
        #expect(throws: CompressionError.self) { try Inflater.inflate(Array(raw.dropLast(20)), format: .deflate, maxOutputBytes: 1 << 20) }
        #expect(throws: CompressionError.self) { try Inflater.inflate([0x78], format: .deflate, maxOutputBytes: 1 << 20) }
    }

    @Test func capsOutput() throws {
        let zeros = [UInt8](repeating: 0, count: 4 << 20)
        let bomb = try Deflater.compress(zeros, format: .gzip, level: 9)
        #expect(bomb.count < 10_000)
        #expect(throws: CompressionError.outputLimitExceeded(limit: 1 << 20)) {
            try Inflater.inflate(bomb, format: .gzip, maxOutputBytes: 1 << 20)
        }
        // Exactly at the cap is allowed.
        #expect(try Inflater.inflate(bomb, format: .gzip, maxOutputBytes: 4 << 20).count == 4 << 20)
    }

    @Test func rejectsTruncatedAndCorrupt() throws {
        let packed = try Deflater.compress(text, format: .gzip)
        #expect(throws: CompressionError.truncated) {
            try Inflater.inflate(Array(packed.dropLast(10)), format: .gzip, maxOutputBytes: 1 << 20)
        }
        var corrupt = packed
        corrupt[20] ^= 0xFF
        corrupt[21] ^= 0xFF
        #expect(throws: (any Error).self) {
            try Inflater.inflate(corrupt, format: .gzip, maxOutputBytes: 1 << 20)
        }
        #expect(throws: (any Error).self) {
            try Inflater.inflate(Array("not gzip at all".utf8), format: .gzip, maxOutputBytes: 1 << 20)
        }
        #expect(throws: CompressionError.truncated) {
            try Inflater.inflate([], format: .deflate, maxOutputBytes: 1 << 20)
        }
    }

    @Test func acceptsConcatenatedGzipMembers() throws {
        let a = try Deflater.compress(Array("hello ".utf8), format: .gzip)
        let b = try Deflater.compress(Array("world".utf8), format: .gzip)
        #expect(try Inflater.inflate(a + b, format: .gzip, maxOutputBytes: 100) == Array("hello world".utf8))
    }
}
