import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import Testing

@testable import CrashIngest

/// Hostile bodies refused as soon as what has been read proves them bad (the contract's
/// "Precise readings": hostile bodies cost what the limits allow, not what they claim).
@Suite struct ReaderHostileTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    private func refusal(_ body: [UInt8], encoding: String? = nil, chunk: Int = 65_536) -> (IngestError?, IngestBodyReader?) {
        do {
            let reader = try IngestBodyReader(contentEncoding: encoding, maxBodyBytes: 1 << 20, maxDecompressedBytes: 16 << 20)
            do {
                for start in stride(from: 0, to: body.count, by: chunk) {
                    try reader.feed(Array(body[start..<min(start + chunk, body.count)]))
                }
                _ = try reader.finish(now: now, version: .newProjectDefault)
                return (nil, reader)
            } catch {
                return (error, reader)
            }
        } catch {
            return (error, nil)
        }
    }

    /// The issue's array bomb: 16 MiB of `{"reports":[1,1,1,...]}` gzip'd to ~16 KB. The
    /// 1001st element is refused where it starts: a few KB are inflated and kept, not 16 MiB.
    @Test func arrayBombIsRefusedAtTheThousandAndFirstElement() throws {
        let limit = 16 << 20
        let head = Array(#"{"reports":["#.utf8)
        var pairs = Array("1,".utf8)
        while pairs.count < limit { pairs += pairs }
        var elements = limit - head.count - 2
        if elements % 2 == 0 { elements -= 1 }  // ends with a 1, not a comma
        let text = head + pairs.prefix(elements) + Array("]}".utf8)
        #expect(text.count <= limit && text.count > limit - 4)
        let bomb = try Deflater.compress(text, format: .gzip, level: 9)
        #expect(bomb.count < 64 << 10)
        let (error, reader) = refusal(bomb, encoding: "gzip", chunk: 16_384)
        let refused = try #require(error)
        #expect(refused.status == 400)
        #expect(refused.message.contains("more than 1000 reports"))
        // Inflation stopped within the first output chunks.
        #expect(try #require(reader).decodedBytes < 256 << 10)
        // The same array with exactly 1000 elements is no bomb: 1000 rejected reports.
        let thousand = Array(#"{"reports":["#.utf8) + Array(repeating: "1", count: 1000).joined(separator: ",").utf8 + Array("]}".utf8)
        let batch = try IngestBodyReader.read(Array(thousand), contentEncoding: nil, now: now)
        #expect(batch.count == 1000 && batch.rejected.count == 1000)
    }

    /// The zip bomb: `{"reports":[` and 16 MiB of spaces in ~16 KB of gzip. Refused with 413
    /// at the decompressed cap, and the white space between tokens is skipped, not kept.
    @Test func whiteSpaceBombIsRefusedWithoutKeepingItsSpaces() throws {
        let text = Array(#"{"reports":["#.utf8) + [UInt8](repeating: 0x20, count: 16 << 20)
        let bomb = try Deflater.compress(text, format: .gzip, level: 9)
        let (error, bombReader) = refusal(bomb, encoding: "gzip", chunk: 16_384)
        #expect(error == IngestError.payloadTooLarge("decompressed body is over the 16777216-byte limit"))
        #expect(try #require(bombReader).decodedBytes == 12)
        // A valid body padded with every kind of white space between its tokens keeps its
        // tokens only, and reads as the compact body does.
        let padding = [UInt8](repeating: 0x20, count: 16_381) + Array("\n\t\r ".utf8)
        let report =
            #"{"id":"6F9619FF-8B86-D011-B42D-00C04FC964FF","timestamp":"2027-01-15T07:00:00Z","kind":"custom","reason":"a  b","app":{"id":"a","version":"1"}}"#
        let compact = Array(#"{"reports":[\#(report)]}"#.utf8)
        var padded = padding
        var inString = false  // the report has no escaped quotes
        for byte in compact {
            padded.append(byte)
            if byte == 0x22 { inString.toggle() }
            if !inString, byte == 0x2C || byte == 0x3A || byte == 0x5B || byte == 0x7B { padded += padding }
        }
        padded += padding
        let reader = try IngestBodyReader(contentEncoding: nil, maxBodyBytes: 1 << 20, maxDecompressedBytes: 16 << 20)
        try reader.feed(padded)
        #expect(reader.decodedBytes == compact.count)
        #expect(try reader.finish(now: now, version: .newProjectDefault).accepted.count == 1)
        #expect(Verdict.streaming(padded, now: now, chunk: 4093) == Verdict.streaming(compact, now: now))
        #expect(Verdict.streaming(compact, now: now).status == 202)
    }

    @Test func nestingDeeperThan32IsRefusedWhereItStarts() throws {
        func body(depth: Int) -> [UInt8] {
            // The top-level object, `reports`, and one report make 3 levels.
            let inner = depth - 3
            return Array(#"{"reports":[{"x":"#.utf8) + [UInt8](repeating: 0x5B, count: inner)
                + [UInt8](repeating: 0x5D, count: inner) + Array("}]}".utf8)
        }
        let ok = try IngestBodyReader.read(body(depth: 32), contentEncoding: nil, now: now)
        #expect(ok.count == 1)
        #expect(throws: IngestError.badRequest("body is nested deeper than 32 arrays and objects")) {
            try IngestBodyReader.read(body(depth: 33), contentEncoding: nil, now: now)
        }
        // A million open brackets: refused at the 33rd, whatever follows.
        let (error, reader) = refusal(Array(#"{"reports":"#.utf8) + [UInt8](repeating: 0x5B, count: 1_000_000))
        #expect(error?.message.contains("deeper than 32") == true)
        #expect(reader.map { $0.decodedBytes <= 65_536 } == true)
    }

    @Test func invalidUTF8IsRefused() {
        let cases: [[UInt8]] = [
            [0xC0, 0x80],  // overlong NUL
            [0xE0, 0x80, 0x80],  // overlong
            [0xED, 0xA0, 0x80],  // a surrogate
            [0xF4, 0x90, 0x80, 0x80],  // past U+10FFFF
            [0xFF],
            [0xE6, 0x97],  // cut short
            [0x80],
        ]
        for bad in cases {
            let body = Array(#"{"reports":[{"reason":""#.utf8) + bad + Array(#""}]}"#.utf8)
            #expect(throws: IngestError.badRequest("body is not JSON: invalid UTF-8"), "\(bad)") {
                try IngestBodyReader.read(body, contentEncoding: nil, now: now)
            }
            // Cut short at the very end of the body, too.
            #expect(throws: IngestError.self) { try IngestBodyReader.read(Array(#"{"reports":[1]}"#.utf8) + bad, contentEncoding: nil, now: now) }
        }
        // Four-byte characters split across chunks are fine.
        let emoji = Array("{\"reports\":[\"😀日é\"]}".utf8)
        for chunk in 1...5 {
            #expect(Verdict.streaming(emoji, now: now, chunk: chunk).status == 202)
        }
    }

    /// An over-long string is measured, not copied; the message has its real length.
    @Test func overLongStringsRejectTheirReportWithTheRealLength() throws {
        let reason = String(repeating: "é", count: 5000)  // 10,000 bytes
        let frames = (0..<300).map { _ in "f" }
        let report: [String: Any] = [
            "id": UUID().uuidString, "timestamp": RFC3339.format(now), "kind": "custom", "reason": reason,
            "app": ["id": "a", "version": "1"],
        ]
        var many = report
        many["reason"] = "r"
        many["stack"] = frames
        var escaped = report
        escaped["reason"] = "r"
        escaped["context"] = ["k": String(repeating: "\u{1}", count: 300)]  // \u0001 x 300: 1800 raw, 300 bytes
        let body = Array(try JSONSerialization.data(withJSONObject: ["reports": [report, many, escaped]]))
        let batch = try IngestBodyReader.read(body, contentEncoding: nil, now: now)
        #expect(batch.rejected.map(\.error) == ["reason: 10000 bytes, at most 8192 allowed", "stack: 300 frames, at most 256 allowed"])
        #expect(batch.accepted.map(\.index) == [2])
        #expect(batch.accepted.first?.report.context?["k"]?.utf8.count == 300)
        #expect(Verdict.streaming(body, now: now) == Verdict.legacy(body, now: now))
    }

    @Test func reportsTwiceOrNotAnArrayIsRefusedEarly() {
        #expect(throws: IngestError.badRequest("body has \"reports\" more than once")) {
            try IngestBodyReader.read(Array(#"{"reports":[1],"reports":[2]}"#.utf8), contentEncoding: nil, now: now)
        }
        // Refused at the first byte of the value, before the rest is read.
        let (error, _) = refusal(Array(#"{"reports":{"a":"#.utf8) + [UInt8](repeating: 0x20, count: 100) + Array("[".utf8))
        #expect(error == IngestError.badRequest("\"reports\" is not an array"))
        let (top, _) = refusal(Array("[1,1,1,".utf8))
        #expect(top == IngestError.badRequest("body is not JSON: expected an object with a \"reports\" array"))
    }

    @Test func compressedBodiesAreCappedLikeBefore() throws {
        let body = Array(#"{"reports":[1]}"#.utf8)
        let gz = try Deflater.compress(body, format: .gzip)
        #expect(try IngestBodyReader.read(gz, contentEncoding: "GZIP", now: now).count == 1)
        #expect(throws: IngestError.badRequest("body is empty: expected a compressed JSON object")) {
            try IngestBodyReader.read([], contentEncoding: "gzip", now: now)
        }
        #expect(throws: IngestError.self) { try IngestBodyReader.read(Array(gz.dropLast(4)), contentEncoding: "gzip", now: now) }
        #expect(throws: IngestError.payloadTooLarge("decompressed body is over the 10-byte limit")) {
            try IngestBodyReader.read(gz, contentEncoding: "gzip", maxDecompressedBytes: 10, now: now)
        }
        #expect(throws: IngestError.payloadTooLarge("body is over the 10-byte limit")) {
            try IngestBodyReader.read(gz, contentEncoding: "gzip", maxBodyBytes: 10, now: now)
        }
        #expect(throws: IngestError.payloadTooLarge("body is over the 10-byte decompressed limit")) {
            try IngestBodyReader.read(body, contentEncoding: nil, maxDecompressedBytes: 10, now: now)
        }
        // Exactly at the limits passes.
        #expect(
            try IngestBodyReader.read(body, contentEncoding: nil, maxBodyBytes: body.count, maxDecompressedBytes: body.count, now: now).count == 1)
        #expect(throws: IngestError.self) { try ContentCoding(header: "compress") }
        #expect(try ContentCoding(header: " Deflate ") == .deflate)
    }
}
