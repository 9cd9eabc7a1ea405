import CrashCompression
import CrashGrouping
import CrashServer
import CrashWire
import Foundation
import Testing

@testable import CrashIngest
@testable import CrashServerTestSupport

/// Inputs the fuzzers found (scripts/fuzz), replayed through the server's code so they stay fixed.
@Suite struct ReliabilityFuzzFindingsTests {
    static let ingestFinding = Array(
        Data(
            base64Encoded:
                "A3sicmVwb3J0cyI6IFt7ImlkIjogIjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMSIsICJ0aW1lc3RhbXAiOiAiMjAyNy0wMS0xNVQwODowMDowMFoiLCAia2luZCI6ICJzaWduYWwiLCAicmVhc29uIjogIi1bX19OU0FycmF5SSBvYmplY3RBdEluZGV4Ol06IGluZGV4IDUgL2V5b25kIGJvdW5kcyBbMCAuLiAyXSIsICJzdGFjayI6IFsiMCBEZW1vIDB4MSAtW0EgYl0gKyA0NCIsICIxIGxpYnN5c3RlbSAweDIgYWJvcnQgKyAtMDEtMTVUMDg6MDA6MDBaIiwgImtpMyJdLCAiZmF0YWwiOiB0cnVlLCAiYXBwIjogeyJpZCI6ICJjb20uZXhgbXBsZSIsICJ2ZXJzaW9uIjogIjEuMC4wIiwgImJ1aWxkIjogIjcifSwgImRldmljZSI6IHsib3MiOiAiaU9TIiwgIm9zVmVyc2lvbiI6ICIxNy4xIiwgImlvZGVsIjogImlQaG9uZTE0LDIiLCAiaWQiOiAiZCJ9LCAiZmluZ2VycGlybnQiOiBbImEiLCAiYiJdLCAiY29udGV4dCI6IHsidXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXVuIjogIi1bX19OU0FycmF5SSBvYmplY3RAdAluZGV4Ol06IGluZGV4IDUgL2V5b25kIGJvdW5kcyBbMCAuLiAyXSIsICJzdGFjayI6IFsiMCBEZW1vIDB4MSAtW0EgYl0gKyA0NCIsICIxIGxpYnN5c3RlbSAweDIgYWJvcnQgKyAtMDEtMTVUMDg6MDA6MDBaIiwgImtpMyJdLCAiZmF0YWwiOiB0cnVlLCAiYXBwIjogeyJpZCI6ICJjb20uZXhhbXBsZSIsICJ2ZXJzaW9uIjogIjEuMC4wIiwgImJ1aWxkIjogIjcifSwgImRldm9udGV4dCI6IHsidXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dSI6ICJpT1MiLCAib3NWZXJzaW9uIjogIjE3LjEiLCAiaW9kZWwiOiAieVBob25lMTQsMiIsICJpAQAAAAAAAAAiOiAiZCJ9LCAiZmluZ2VydXV1dSI6ICJpT1MiLCAib3NWZXJzaW9uIjogIjE3LjEiLCAiaW9kZWwiOiAiaVBob25lMTQsMiIsICJpIjogImQifSwgImZpbmdlcnBpcm50IjogWyJhIiwgImIiXSwgImNvbnRleHQiOiB7InV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dWsiOiAidiJ9fSwgeyJpZCI6ICJ4In0sIDQyLCBudWxsXX0="
        )!)
    static let normalizerFinding = Array(Data(base64Encoded: "DGUKKysrKwAAAAAAAAAAAAAAKwAgMCAwMDAAAAAAACAgIDAgejAAAAA=")!)

    @Test func ingestIdentityAndGzipAgree() throws {
        let body = Array(Self.ingestFinding.dropFirst())
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let plain = IngestDecoding.evaluate(body, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
        let packed = IngestDecoding.evaluate(try Deflater.compress(body, format: .gzip), encoding: "gzip", maxDecompressedBytes: 1 << 20, now: now)
        #expect(plain == packed)
        #expect([202, 400, 413].contains(plain.status))
    }

    /// Why the finding above disagreed: Foundation checks a string's characters only when
    /// it decodes that string, and throws its own (non-`DecodingError`) error. A raw control
    /// character then failed the whole batch as "not JSON", or only its report when another
    /// field of that report failed first, which depends on the per-process hash seed. Now
    /// the body is checked first: a raw control character in any string is a 400 naming
    /// its offset, whatever else the body holds.
    @Test(arguments: ["reason", "context key", "context value", "device id"])
    func rawControlCharacterIsNotJSONWherever(_ place: String) throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        func report(_ id: Int, reason: String = "boom", context: String = "{}", deviceID: String = "d") -> String {
            """
            {"id": "00000000-0000-0000-0000-00000000000\(id)", "timestamp": "2027-01-15T08:00:00Z", "kind": "custom",
             "reason": "\(reason)", "app": {"id": "com.example", "version": "1.0"}, "device": {"id": "\(deviceID)"},
             "context": \(context)}
            """
        }
        let control = "a\u{1}b"  // a raw U+0001 byte inside the JSON string
        let bad: String
        switch place {
        case "reason": bad = report(2, reason: control)
        case "context key": bad = report(2, context: "{\"x\": [1], \"\(control)\": \"v\"}")
        case "context value": bad = report(2, context: "{\"k\": \"\(control)\"}")
        default: bad = report(2, deviceID: control)
        }
        let body = Array("{\"reports\": [\(report(1)), \(bad), \(report(3))]}".utf8)
        let plain = IngestDecoding.evaluate(body, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
        #expect(plain.status == 400)
        #expect(plain.error?.hasPrefix("body is not JSON: unescaped control character U+0001 in a string at byte ") == true, "\(plain)")
        let packed = IngestDecoding.evaluate(try Deflater.compress(body, format: .gzip), encoding: "gzip", maxDecompressedBytes: 1 << 20, now: now)
        #expect(packed == plain)
        // Escaped, the same character is a rejected field of one report, not a bad body.
        let escaped = Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: "\u{1}", with: "\\u0001").utf8)
        let outcome = IngestDecoding.evaluate(escaped, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
        #expect(outcome.status == 202 && outcome.valid + outcome.rejected == 3, "\(outcome)")
    }

    @Test func controlCharacterScanFollowsStringsAndEscapes() {
        func scan(_ text: String) -> Int? {
            var scanner = JSONBodyScanner()
            var kept = GrowingBytes()
            do {
                try Array(text.utf8).withUnsafeBufferPointer { (buffer) throws(IngestError) in
                    try scanner.scan(buffer, keeping: &kept)
                }
                return nil
            } catch {
                guard let at = error.message.range(of: "at byte ") else { return nil }
                return Int(error.message[at.upperBound...])
            }
        }
        #expect(scan("{\"a\":\n\t\"b\"}") == nil)  // white space between tokens is JSON
        #expect(scan("{\"a\": \"x\ny\"}") == 8)
        #expect(scan(#"{"a": "q\"\\"}"#) == nil)
        #expect(scan("{\"a\": \"\\\"\u{0}\"}") == 9)
        #expect(scan("{\"a\": \"\\\\\"} \u{1F}") == nil)  // after the string closes: not a string's
    }

    @Test func normalizerInvariantsHold() {
        let text = String(decoding: Self.normalizerFinding, as: UTF8.self)
        let normalized = Grouping.normalize(reason: text)
        #expect(
            Grouping.normalize(reason: normalized) == normalized,
            "reason: \(text.debugDescription) -> \(normalized.debugDescription) -> \(Grouping.normalize(reason: normalized).debugDescription)")
        let frame = Grouping.normalize(frame: text)
        // Once an open finding: "e\n++++ 000 0 z0" -> "e\n++ z0" changed again on a second
        // pass. Frames now run to a fixed point.
        #expect(
            Grouping.normalize(frame: frame) == frame,
            "frame: \(text.debugDescription) -> \(frame.debugDescription) -> \(Grouping.normalize(frame: frame).debugDescription)")
        let title = Grouping.title(normalizedReason: normalized)
        #expect(title.count <= Grouping.titleLimit && !title.contains("\n"))
    }
}
