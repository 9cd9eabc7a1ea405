@testable import CrashServer
import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import Testing

/// Inputs the fuzzers found (scripts/fuzz), replayed through the server's code so they stay fixed.
@Suite struct ReliabilityFuzzFindingsTests {
    static let ingestFinding = Array(Data(base64Encoded: "A3sicmVwb3J0cyI6IFt7ImlkIjogIjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMSIsICJ0aW1lc3RhbXAiOiAiMjAyNy0wMS0xNVQwODowMDowMFoiLCAia2luZCI6ICJzaWduYWwiLCAicmVhc29uIjogIi1bX19OU0FycmF5SSBvYmplY3RBdEluZGV4Ol06IGluZGV4IDUgL2V5b25kIGJvdW5kcyBbMCAuLiAyXSIsICJzdGFjayI6IFsiMCBEZW1vIDB4MSAtW0EgYl0gKyA0NCIsICIxIGxpYnN5c3RlbSAweDIgYWJvcnQgKyAtMDEtMTVUMDg6MDA6MDBaIiwgImtpMyJdLCAiZmF0YWwiOiB0cnVlLCAiYXBwIjogeyJpZCI6ICJjb20uZXhgbXBsZSIsICJ2ZXJzaW9uIjogIjEuMC4wIiwgImJ1aWxkIjogIjcifSwgImRldmljZSI6IHsib3MiOiAiaU9TIiwgIm9zVmVyc2lvbiI6ICIxNy4xIiwgImlvZGVsIjogImlQaG9uZTE0LDIiLCAiaWQiOiAiZCJ9LCAiZmluZ2VycGlybnQiOiBbImEiLCAiYiJdLCAiY29udGV4dCI6IHsidXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXVuIjogIi1bX19OU0FycmF5SSBvYmplY3RAdAluZGV4Ol06IGluZGV4IDUgL2V5b25kIGJvdW5kcyBbMCAuLiAyXSIsICJzdGFjayI6IFsiMCBEZW1vIDB4MSAtW0EgYl0gKyA0NCIsICIxIGxpYnN5c3RlbSAweDIgYWJvcnQgKyAtMDEtMTVUMDg6MDA6MDBaIiwgImtpMyJdLCAiZmF0YWwiOiB0cnVlLCAiYXBwIjogeyJpZCI6ICJjb20uZXhhbXBsZSIsICJ2ZXJzaW9uIjogIjEuMC4wIiwgImJ1aWxkIjogIjcifSwgImRldm9udGV4dCI6IHsidXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dSI6ICJpT1MiLCAib3NWZXJzaW9uIjogIjE3LjEiLCAiaW9kZWwiOiAieVBob25lMTQsMiIsICJpAQAAAAAAAAAiOiAiZCJ9LCAiZmluZ2VydXV1dSI6ICJpT1MiLCAib3NWZXJzaW9uIjogIjE3LjEiLCAiaW9kZWwiOiAiaVBob25lMTQsMiIsICJpIjogImQifSwgImZpbmdlcnBpcm50IjogWyJhIiwgImIiXSwgImNvbnRleHQiOiB7InV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dXV1dWsiOiAidiJ9fSwgeyJpZCI6ICJ4In0sIDQyLCBudWxsXX0=")!)
    static let normalizerFinding = Array(Data(base64Encoded: "DGUKKysrKwAAAAAAAAAAAAAAKwAgMCAwMDAAAAAAACAgIDAgejAAAAA=")!)

    @Test func ingestIdentityAndGzipAgree() throws {
        let body = Array(Self.ingestFinding.dropFirst())
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let plain = IngestDecoding.evaluate(body, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
        let packed = IngestDecoding.evaluate(try Deflater.compress(body, format: .gzip), encoding: "gzip", maxDecompressedBytes: 1 << 20, now: now)
        #expect(plain == packed)
        #expect([202, 400, 413].contains(plain.status))
    }

    @Test func normalizerInvariantsHold() {
        let text = String(decoding: Self.normalizerFinding, as: UTF8.self)
        let normalized = Grouping.normalize(reason: text)
        #expect(Grouping.normalize(reason: normalized) == normalized, "reason: \(text.debugDescription) -> \(normalized.debugDescription) -> \(Grouping.normalize(reason: normalized).debugDescription)")
        let frame = Grouping.normalize(frame: text)
        // Once an open finding: "e\n++++ 000 0 z0" -> "e\n++ z0" changed again on a second
        // pass. Frames now run to a fixed point.
        #expect(Grouping.normalize(frame: frame) == frame, "frame: \(text.debugDescription) -> \(frame.debugDescription) -> \(Grouping.normalize(frame: frame).debugDescription)")
        let title = Grouping.title(normalizedReason: normalized)
        #expect(title.count <= Grouping.titleLimit && !title.contains("\n"))
    }
}
