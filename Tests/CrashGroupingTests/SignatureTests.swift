import CrashGrouping
import CrashWire
import Testing

@Suite("Signature")
struct SignatureTests {
    @Test("version and hash format")
    func format() {
        let s = Grouping.signature(kind: .custom, reason: "boom", stack: nil, fingerprint: nil, version: .v1)
        #expect(s.version == .v1)
        #expect(s.hash.count == 64)
        #expect(s.hash.allSatisfy { "0123456789abcdef".contains($0) })
        // The scheme is fixed for v1: SHA-256 over length-prefixed "v1", kind, "reason", text.
        #expect(s == Grouping.signature(kind: .custom, reason: "  boom ", stack: [], fingerprint: nil, version: .v1))
    }

    @Test("the v1 hash of a known input never changes")
    func stableHash() {
        let s = Grouping.signature(
            kind: .container, reason: "*** -[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]", stack: nil,
            fingerprint: nil, version: .v1)
        #expect(s.normalizedReason == "*** -[__NSArrayI objectAtIndex:]: index <n> beyond bounds [<n> .. <n>]")
        #expect(s.hash == Self.referenceHash(["v1", "container", "reason", s.normalizedReason]))
    }

    /// The scheme written out independently: 4-byte big-endian length, then UTF-8 bytes.
    static func referenceHash(_ parts: [String]) -> String {
        var bytes: [UInt8] = []
        for part in parts {
            let utf8 = Array(part.utf8)
            let n = UInt32(utf8.count)
            bytes += [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
            bytes += utf8
        }
        return ReferenceSHA256.hex(bytes)
    }

    @Test("title is the first line, cut at 200 characters")
    func title() {
        let s = Grouping.signature(
            kind: .custom, reason: "2018-03-18 14:43:32.340 Demo[2900:449839]   first  line 7\nsecond", stack: nil,
            fingerprint: nil, version: .v1)
        #expect(s.title == "first line <n>")
        let long = String(repeating: "é", count: 300)
        #expect(Grouping.title(normalizedReason: long).count == 200)
        #expect(Grouping.title(normalizedReason: "a\r\nb") == "a")
    }

    @Test("a fingerprint decides the group; reason still gives title and normalized reason")
    func fingerprint() {
        let a = Grouping.signature(kind: .custom, reason: "order 1 failed", stack: nil, fingerprint: ["checkout"], version: .v1)
        let b = Grouping.signature(kind: .custom, reason: "other", stack: ["x"], fingerprint: ["checkout"], version: .v1)
        #expect(a.hash == b.hash)
        #expect(a.title == "order <n> failed")
        #expect(a.normalizedReason == "order <n> failed")
        // Parts are used as sent: not normalized.
        let c = Grouping.signature(kind: .custom, reason: "x", stack: nil, fingerprint: ["order 1"], version: .v1)
        let d = Grouping.signature(kind: .custom, reason: "x", stack: nil, fingerprint: ["order 2"], version: .v1)
        #expect(c.hash != d.hash)
        // An empty fingerprint (invalid on the wire) falls back to the computed grouping.
        #expect(
            Grouping.signature(kind: .custom, reason: "x", stack: nil, fingerprint: [], version: .v1).hash
                == Grouping.signature(kind: .custom, reason: "x", stack: nil, fingerprint: nil, version: .v1).hash)
    }

    @Test("frames count only for signal and exception, and only the first three")
    func frames() {
        let stack = ["0 Demo 0x1 a() + 1", "1 Demo 0x2 b() + 2", "2 Demo 0x3 c() + 3"]
        for kind in ReportKind.allCases {
            let with = Grouping.signature(kind: kind, reason: "r", stack: stack, fingerprint: nil, version: .v1).hash
            let without = Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: nil, version: .v1).hash
            if kind == .signal || kind == .exception {
                #expect(with != without, "\(kind)")
            } else {
                #expect(with == without, "\(kind)")
            }
        }
        let four = Grouping.signature(kind: .signal, reason: "r", stack: stack + ["3 Demo 0x4 d() + 4"], fingerprint: nil, version: .v1)
        #expect(four.hash == Grouping.signature(kind: .signal, reason: "r", stack: stack, fingerprint: nil, version: .v1).hash)
        // A frame is not a part of the reason: moving text between them changes the signature.
        #expect(
            Grouping.signature(kind: .signal, reason: "a", stack: ["b"], fingerprint: nil, version: .v1).hash
                != Grouping.signature(kind: .signal, reason: "ab", stack: nil, fingerprint: nil, version: .v1).hash)
    }
}

@Suite("Signature of frames as bytes")
struct FrameBytesSignatureTests {
    /// Every stack of both corpora, each report in both versions and as every kind that reads
    /// frames differently (v1 reads them only for `signal` and `exception`).
    static let inputs: [GroupingInput] =
        (Corpus.groups.same + Corpus.groupsV2.same).flatMap(\.variants)
        + (Corpus.groups.distinct + Corpus.groupsV2.distinct).flatMap { [$0.a, $0.b] }

    @Test("frames as UTF-8 buffers sign as the same frames as strings")
    func sameAsStrings() {
        #expect(Self.inputs.filter { ($0.stack?.count ?? 0) > 3 }.count >= 10)
        for input in Self.inputs {
            for version in GroupingVersion.allCases {
                for kind in [ReportKind.signal, .custom] {
                    let strings = Grouping.signature(
                        kind: kind, reason: input.reason, stack: input.stack, fingerprint: input.fingerprint, version: version)
                    #expect(Self.bytesSignature(kind, input, version) == strings, "\(input.reason) \(version)")
                }
            }
        }
    }

    @Test("an empty stack, no stack and a fingerprint sign as with strings")
    func edges() {
        for version in GroupingVersion.allCases {
            for (stack, fingerprint) in [([String]?.none, [String]?.none), ([], nil), (["main (app) [app]"], ["a", "b"])] {
                let input = GroupingInput(kind: .exception, reason: "boom 0x1f", stack: stack, fingerprint: fingerprint)
                let strings = Grouping.signature(
                    kind: .exception, reason: input.reason, stack: stack, fingerprint: fingerprint, version: version)
                #expect(Self.bytesSignature(.exception, input, version) == strings)
            }
        }
    }

    /// The frames copied into one buffer, as a body holds them, and passed as pointers into it.
    static func bytesSignature(_ kind: ReportKind, _ input: GroupingInput, _ version: GroupingVersion) -> Signature {
        guard let stack = input.stack else {
            return Grouping.signature(
                kind: kind, reason: input.reason, frames: nil, fingerprint: input.fingerprint, version: version)
        }
        let text = stack.flatMap(\.utf8)
        return text.withUnsafeBufferPointer { all in
            var start = 0
            let frames = stack.map { frame in
                defer { start += frame.utf8.count }
                return UnsafeBufferPointer(rebasing: all[start..<start + frame.utf8.count])
            }
            return frames.withUnsafeBufferPointer {
                Grouping.signature(kind: kind, reason: input.reason, frames: $0, fingerprint: input.fingerprint, version: version)
            }
        }
    }
}
