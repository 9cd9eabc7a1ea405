import CodecTestSupport
import CrashCompression
import CrashIngest
import Foundation
import Testing

/// `Content-Encoding: gzip` (ISA-L's igzip), `br` and `zstd` through the one reader every ingest
/// route uses: the same streaming, the same caps, the same 400/413 (`deflate`, zlib's
/// ``Inflater``, has its own tests in CrashCompressionTests).
@Suite struct ContentCodingTests {
    static let codings: [String] = ["gzip", "br", "zstd"]

    static func encode(_ plain: [UInt8], _ coding: String) throws -> [UInt8] {
        switch coding {
        case "gzip": return try Deflater.compress(plain, format: .gzip)
        case "br": return try TestEncoders.brotli(plain)
        default: return try TestEncoders.zstd(plain)
        }
    }

    static let plain: [UInt8] = Array(
        ("{\"reports\":[" + (0..<200).map { "{\"n\":\($0),\"reason\":\"index out of range\"}" }.joined(separator: ",") + "]}").utf8)

    /// Feeds `body` in chunks of `chunk` bytes and returns the decoded bytes, or the refusal.
    static func read(
        _ body: [UInt8], coding: String, chunk: Int, maxBody: Int = 1 << 20, maxDecoded: Int = 1 << 20
    ) -> Result<[UInt8], IngestError> {
        do {
            var reader = try CappedBodyReader(
                coding: try ContentCoding(header: coding), maxBodyBytes: maxBody, maxDecompressedBytes: maxDecoded)
            var decoded: [UInt8] = []
            var start = 0
            while start < body.count {
                let end = min(start + chunk, body.count)
                try body[start..<end].withUnsafeBytes { try reader.feed($0) { decoded.append(contentsOf: $0) } }
                start = end
            }
            try reader.finish()
            return .success(decoded)
        } catch let error as IngestError {
            return .failure(error)
        } catch {
            Issue.record("unexpected error \(error)")
            return .failure(.badRequest("\(error)"))
        }
    }

    /// The refusal in `result`, or nil after recording that the `what` passed.
    static func refusal(_ result: Result<[UInt8], IngestError>, _ what: String) -> IngestError? {
        guard case .failure(let error) = result else {
            Issue.record("\(what) passed")
            return nil
        }
        return error
    }

    @Test(arguments: codings)
    func headerIsRead(_ coding: String) throws {
        let expected: [String: ContentCoding] = ["gzip": .gzip, "br": .br, "zstd": .zstd]
        #expect(try ContentCoding(header: " \(coding.uppercased()) ") == expected[coding])
        #expect(throws: IngestError.self) { try ContentCoding(header: "compress") }
    }

    @Test(arguments: codings, [1, 7, 4096, 1 << 20])
    func decodesWholeAndInChunks(_ coding: String, chunk: Int) throws {
        let body = try Self.encode(Self.plain, coding)
        #expect(body.count < Self.plain.count)
        #expect(try Self.read(body, coding: coding, chunk: chunk).get() == Self.plain)
    }

    @Test func zstdConcatenatedFramesDecodeAsOne() throws {
        let half = Self.plain.count / 2
        let body = try TestEncoders.zstd(Array(Self.plain[..<half])) + TestEncoders.zstd(Array(Self.plain[half...]))
        #expect(try Self.read(body, coding: "zstd", chunk: 5).get() == Self.plain)
    }

    @Test(arguments: [1, 3, 1 << 20])
    func gzipConcatenatedMembersDecodeAsOne(_ chunk: Int) throws {
        let half = Self.plain.count / 2
        let body = try Self.encode(Array(Self.plain[..<half]), "gzip") + Self.encode(Array(Self.plain[half...]), "gzip")
        #expect(try Self.read(body, coding: "gzip", chunk: chunk).get() == Self.plain)
    }

    @Test(arguments: codings, [1, 1 << 20])
    func truncatedIs400(_ coding: String, chunk: Int) throws {
        let body = try Self.encode(Self.plain, coding)
        for cut in [1, body.count / 2, body.count - 1] {
            let error = Self.refusal(Self.read(Array(body.prefix(cut)), coding: coding, chunk: chunk), "truncated body")
            #expect(error?.status == 400)
            #expect(error?.message.hasPrefix("body is not JSON: ") == true)
        }
        let empty = Self.read([], coding: coding, chunk: chunk)
        #expect(Self.refusal(empty, "empty body")?.status == 400)
    }

    @Test(arguments: codings)
    func corruptIs400(_ coding: String) throws {
        var body = try Self.encode(Self.plain, coding)
        for index in stride(from: 0, to: body.count, by: 3) { body[index] ^= 0x5A }
        let garbage = Self.read(Array("{\"reports\":[]}".utf8), coding: coding, chunk: 1 << 20)
        for result in [Self.read(body, coding: coding, chunk: 1), garbage] {
            guard let error = Self.refusal(result, "corrupt body") else { continue }
            #expect(error.status == 400)
            #expect(error.message.hasPrefix("body is not JSON: "))
        }
        // Bytes after a complete stream are refused, not ignored.
        let trailing = Self.read(try Self.encode(Self.plain, coding) + [0x00, 0x01], coding: coding, chunk: 1 << 20)
        #expect(Self.refusal(trailing, "trailing garbage")?.status == 400)
    }

    /// A bomb: 64 MiB of one byte, a few KiB compressed, read with a 1 MiB cap. The reader
    /// stops at the cap (413) without holding more than a chunk: the test keeps no output.
    @Test(arguments: codings)
    func bombIs413AtTheCap(_ coding: String) throws {
        let bomb = try Self.encode([UInt8](repeating: 0x20, count: 64 << 20), coding)
        #expect(bomb.count < 64 * 1024)
        let limit = 1 << 20
        var reader = try CappedBodyReader(
            coding: try ContentCoding(header: coding), maxBodyBytes: 1 << 20, maxDecompressedBytes: limit)
        var seen = 0
        let error = #expect(throws: IngestError.self) {
            try bomb.withUnsafeBytes { try reader.feed($0) { seen += $0.count } }
        }
        #expect(error?.status == 413)
        #expect(seen <= limit)
        // Exactly the limit passes.
        let exact = try Self.encode([UInt8](repeating: 0x20, count: limit), coding)
        #expect(try Self.read(exact, coding: coding, chunk: 1 << 20, maxDecoded: limit).get().count == limit)
        let over = Self.read(try Self.encode([UInt8](repeating: 0x20, count: limit + 1), coding), coding: coding, chunk: 1, maxDecoded: limit)
        #expect(Self.refusal(over, "over the cap")?.status == 413)
    }

    @Test(arguments: codings)
    func compressedCapApplies(_ coding: String) throws {
        let body = try Self.encode(Self.plain, coding)
        let result = Self.read(body, coding: coding, chunk: 1 << 20, maxBody: body.count - 1)
        #expect(Self.refusal(result, "over the body cap")?.status == 413)
        #expect(try Self.read(body, coding: coding, chunk: 1 << 20, maxBody: body.count).get() == Self.plain)
    }
}
