import CrashGrouping
import CrashWire
import SeededRandom
import Testing

/// Grouping v1 is frozen: stored groups must never change under their users. These tests
/// pin v1's output, byte for byte, over a large seeded set of inputs, so that any change
/// to a v1 rule (or a refactoring that changes behaviour) fails here, not in production.
///
/// The digests were recorded when v2 was added, after a differential run had shown the
/// split normalizer (`Normalizer+*.swift`) byte-identical to the single-file v1 normalizer
/// of 760eb07 on 900 000 generated reasons and frames. Never update them to make a change
/// pass: a change to v1's output is a new grouping version.
@Suite("Frozen v1")
struct FrozenV1Tests {
    /// Reasons and frames built from the property tests' rule-triggering pieces, and
    /// random bytes: the SHA-256 of every normalized text, in order.
    @Test("v1 normalization of 30 000 generated inputs is byte-identical to the recorded digest")
    func normalizationDigest() {
        var rng = SplitMix64(seed: 0xF0_2E41)
        var all: [UInt8] = []
        func add(_ text: String) {
            all.append(contentsOf: text.utf8)
            all.append(0xFF)  // never in UTF-8: a separator no output can contain
        }
        for _ in 0..<25_000 {
            let text = PropertyTests.randomText(&rng)
            add(Grouping.normalize(reason: text))
            add(Grouping.normalize(frame: text))
        }
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...200, using: &rng)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = String(decoding: bytes, as: UTF8.self)
            add(Grouping.normalize(reason: text))
            add(Grouping.normalize(frame: text))
        }
        #expect(ReferenceSHA256.hex(all) == Self.normalizationDigest)
    }

    /// v1 signatures of generated reports of every kind, with and without stacks.
    @Test("v1 signatures of 5 000 generated reports are byte-identical to the recorded digest")
    func signatureDigest() {
        var rng = SplitMix64(seed: 0xF0_2E42)
        var all: [UInt8] = []
        for _ in 0..<5_000 {
            let kind = ReportKind.allCases.randomElement(using: &rng)!
            let reason = PropertyTests.randomText(&rng)
            let frames = Int.random(in: 0...5, using: &rng)
            let stack = frames == 0 ? nil : (0..<frames).map { _ in PropertyTests.randomText(&rng) }
            let signature = Grouping.signature(kind: kind, reason: reason, stack: stack, fingerprint: nil, version: .v1)
            all.append(contentsOf: signature.hash.utf8)
            all.append(contentsOf: signature.title.utf8)
            all.append(0xFF)
        }
        #expect(ReferenceSHA256.hex(all) == Self.signatureDigest)
    }

    static let normalizationDigest = "2301f835dcdaebafa51ef173a8e5baa4bf3f647728c0d09a880f8162829079f7"
    static let signatureDigest = "02fc6d76af996924fe4b9225428dee081eb3cfc67ed7f8782a00b9d9920f030a"
}
