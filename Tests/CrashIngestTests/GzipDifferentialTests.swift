import CrashCompression
import CrashIngest
import SeededRandom
import Testing

/// The server reads `Content-Encoding: gzip` with ISA-L's igzip (`GzipDecoder`), which is
/// faster than zlib; these tests hold it to zlib's decisions (``Inflater``, the decoder it
/// replaced): on valid streams, damaged ones and every optional header field, fed whole or in
/// small chunks, both refuse or both give the same bytes.
@Suite struct GzipDifferentialTests {
    /// zlib's verdict: the decoded bytes, or nil for a refusal.
    static func zlib(_ body: [UInt8], chunk: Int) -> [UInt8]? {
        do {
            let inflater = try Inflater(format: .gzip, maxOutputBytes: 1 << 24)
            for start in stride(from: 0, to: body.count, by: chunk) {
                try inflater.feed(Array(body[start..<min(start + chunk, body.count)]))
            }
            return try inflater.finish()
        } catch {
            return nil
        }
    }

    /// The ingest reader's verdict with `Content-Encoding: gzip`; every refusal must be a 400.
    static func ingest(_ body: [UInt8], chunk: Int) -> [UInt8]? {
        switch ContentCodingTests.read(body, coding: "gzip", chunk: chunk, maxBody: 1 << 24, maxDecoded: 1 << 24) {
        case .success(let decoded):
            return decoded
        case .failure(let error):
            #expect(error.status == 400, "\(error)")
            return nil
        }
    }

    @Test(arguments: [1, 2, 3])
    func damagedStreamsGetZlibsDecisions(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        let alphabet = Array("{\"reports\":[ab, cd]}0123".utf8)
        var refused = 0
        var decoded = 0
        for _ in 0..<1500 {
            // Text like a body's, or random bytes; now and then longer than the decoder's 64 KiB output buffer.
            let length = Int.random(in: 0..<(Int.random(in: 0..<20, using: &rng) == 0 ? 150_000 : 600), using: &rng)
            let random = Bool.random(using: &rng) && Bool.random(using: &rng)
            let plain = (0..<length).map { _ in
                random ? UInt8.random(in: 0...255, using: &rng) : alphabet.randomElement(using: &rng)!
            }
            guard var body = try? Deflater.compress(plain, format: .gzip, level: Int32.random(in: 0...9, using: &rng)) else {
                Issue.record("deflate failed")
                return
            }
            if Int.random(in: 0..<4, using: &rng) == 0 { body += body }
            for _ in 0..<Int.random(in: 0..<4, using: &rng) {
                switch Int.random(in: 0..<4, using: &rng) {
                case 0 where !body.isEmpty: body[Int.random(in: 0..<body.count, using: &rng)] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
                case 1 where !body.isEmpty: body[Int.random(in: 0..<body.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                case 2 where body.count > 1: body.removeLast(Int.random(in: 1...min(8, body.count - 1), using: &rng))
                default:
                    for _ in 0..<Int.random(in: 1...4, using: &rng) {
                        body.append(Bool.random(using: &rng) ? 0 : UInt8.random(in: 0...255, using: &rng))
                    }
                }
            }
            let chunk = [1, Int.random(in: 1...64, using: &rng), 1 << 20].randomElement(using: &rng)!
            let expected = Self.zlib(body, chunk: chunk)
            let actual = Self.ingest(body, chunk: chunk)
            #expect(actual == expected, "body of \(body.count) bytes, chunk \(chunk): \(body.prefix(16))...")
            if expected == nil { refused += 1 } else { decoded += 1 }
        }
        // Both kinds of stream were tried.
        #expect(refused > 300 && decoded > 300, "refused \(refused), decoded \(decoded)")
    }

    /// A member with every optional header field (RFC 1952 2.3.1): extra field, file name,
    /// comment, and the header CRC, which must match.
    @Test(arguments: [1, 5, 1 << 20])
    func optionalHeaderFieldsAreReadAndChecked(chunk: Int) throws {
        let plain = Array("{\"reports\":[]}".utf8)
        let packed = try Deflater.compress(plain, format: .gzip)
        var header: [UInt8] = [0x1F, 0x8B, 8, 0x04 | 0x08 | 0x10 | 0x02] + packed[4..<10]
        header += [3, 0, 0x41, 0x42, 0x43] + Array("report.json".utf8) + [0] + Array("a comment".utf8) + [0]
        let crc = Self.crc32(header)
        let body = header + [UInt8(crc & 0xFF), UInt8(crc >> 8 & 0xFF)] + packed[10...]
        #expect(Self.ingest(body, chunk: chunk) == plain)
        #expect(Self.zlib(body, chunk: chunk) == plain)

        var badHeaderCRC = body
        badHeaderCRC[header.count] ^= 1
        #expect(Self.ingest(badHeaderCRC, chunk: chunk) == nil)
        #expect(Self.zlib(badHeaderCRC, chunk: chunk) == nil)
    }

    /// RFC 1952: "A compliant decompressor must give an error indication if any reserved bit
    /// is non-zero". igzip does not look; the decoder does, in any member, however it is split.
    @Test(arguments: [UInt8(0x20), 0x40, 0x80], [1, 2, 4, 1 << 20])
    func reservedFlagsAreRefused(flag: UInt8, chunk: Int) throws {
        let member = try Deflater.compress(Array("{\"reports\":[]}".utf8), format: .gzip)
        var flagged = member
        flagged[3] |= flag
        #expect(Self.ingest(member + member, chunk: chunk) != nil)
        #expect(Self.ingest(flagged, chunk: chunk) == nil)
        #expect(Self.ingest(member + flagged, chunk: chunk) == nil)
        #expect(Self.zlib(member + flagged, chunk: chunk) == nil)
    }

    @Test func wrongMethodChecksumAndLengthAreRefused() throws {
        let member = try Deflater.compress(Array(String(repeating: "crash ", count: 100).utf8), format: .gzip)
        for index in [2, member.count - 8, member.count - 5, member.count - 4, member.count - 1] {
            var damaged = member
            damaged[index] ^= 0x10
            #expect(Self.ingest(damaged, chunk: 1 << 20) == nil, "byte \(index)")
            #expect(Self.zlib(damaged, chunk: 1 << 20) == nil, "byte \(index)")
        }
    }

    /// CRC-32 (ISO-HDLC, as gzip uses it), bit by bit: only for building test headers.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}
