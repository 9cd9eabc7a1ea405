import CrashGrouping
import CrashWire
import SeededRandom
import Testing

@Suite("Properties")
struct PropertyTests {
    /// Pieces that trigger every rule, and pieces that sit on their edges.
    static let pieces: [String] = [
        "0x", "0x7f8740e21bb0", "0x0", "0x?", "1f", "ff", "<", ">", "<Student 0x1>", "<A: 0x2;", "Demo", "Demo[2900:449839] ",
        "[", "]", "(", ")", "{", "}", ":", ";", ",", ".", " ", "  ", "\t", "\n", "\r\n", "\r", "-", "+", "+ 44", "@", "#", "#1",
        "?", "=", "&", "'", "\"", "/", "//", "://", "https", "http://a.b/c?d=1&e=2#f", "2026-11-21", "T10:00:00Z",
        "2018-03-18 14:43:32.340558+0800 ", " +0000", "14:43:32", "192.168.1.1", ":8080", "1", "42", "007", "3.14", "1.2.3",
        "8F0E1C9A-1234-4ABC-9DEF-0123456789AB", "e3b0c44298fc1c149afbf4c8996fb924", "a@b.co", "icon@2x.png", "swift",
        ".swift:12:5", "Users", "/Users/alice/", "home", "new = ", "old = x;", "code", "Code=", "errno", "signal", "line",
        "iPhone14,2", "UTF-8", "libc.so.6", "ms", "250ms", "16MB", "µs", "é", "数", "组", "💣", "\u{0}", "\u{1B}[31m", "$s4",
        "_", "x", "X", "frame #", "frame #0: ", "3   ", "[ra] ", ")[0x5582]", "(+0x3143)", "+0x12f", "__NSArray0", "\u{FFFD}",
        "0X1A", "0xdead10cc", "64bit", "Z", "e", "E", "1e5", "٣", "\u{A0}", "\u{2028}",
    ]

    static func randomText(_ rng: inout SplitMix64) -> String {
        let count = Int.random(in: 1...24, using: &rng)
        var text = ""
        for _ in 0..<count { text += pieces.randomElement(using: &rng)! }
        return text
    }

    @Test("normalization is idempotent on random compositions of tricky pieces")
    func idempotentRandom() {
        var rng = SplitMix64(seed: 0x5EED_0001)
        var failures: [String] = []
        for _ in 0..<20_000 {
            let text = Self.randomText(&rng)
            let reason = Grouping.normalize(reason: text)
            if Grouping.normalize(reason: reason) != reason { failures.append("reason: \(text.debugDescription)") }
            let frame = Grouping.normalize(frame: text)
            if Grouping.normalize(frame: frame) != frame { failures.append("frame: \(text.debugDescription)") }
        }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.prefix(5))")
    }

    @Test("normalization is idempotent on the corpus inputs")
    func idempotentCorpus() {
        for c in Corpus.cases {
            let once = c.isFrame ? Grouping.normalize(frame: c.input) : Grouping.normalize(reason: c.input)
            let twice = c.isFrame ? Grouping.normalize(frame: once) : Grouping.normalize(reason: once)
            #expect(once == twice, "\(c)")
        }
    }

    /// Inputs the libFuzzer target (`scripts/fuzz`) found not idempotent, kept as they were found.
    static let fuzzFindings: [[UInt8]] = [
        [
            0x33, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x20, 0x30, 0x78, 0x30, 0x30, 0x30,
            0x30, 0x30, 0x00, 0x00, 0x00, 0x20, 0x2b, 0x20, 0x30, 0x78, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
            0x30, 0x30, 0x31, 0x00, 0x00, 0x00, 0x20, 0x20, 0x30, 0x78, 0x30, 0x30, 0x30, 0x30, 0x30, 0x00,
            0x00, 0x00, 0x20, 0x2b, 0x20, 0x30, 0x78, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x31,
            0x30, 0x30, 0x63, 0x61, 0x62, 0x31, 0x33, 0x20, 0x32, 0x00, 0x00, 0x00, 0x00, 0x6c, 0x65, 0x72,
            0x20, 0x30, 0x78, 0x36,
        ],
        [
            0x0c, 0x65, 0x0a, 0x2b, 0x2b, 0x2b, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x2b, 0x00, 0x20, 0x30, 0x20, 0x30, 0x30, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20,
            0x20, 0x20, 0x30, 0x20, 0x7a, 0x30, 0x00, 0x00, 0x00,
        ],
        [
            0x3c, 0x32, 0x31, 0x5f, 0x5f, 0x17, 0x32, 0x30, 0x31, 0x38, 0x0c, 0x65, 0x0a, 0x2b, 0x2b, 0x2b,
            0x2b, 0x2b, 0x2b, 0x00, 0x20, 0x30, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x00, 0x20, 0x30, 0x20, 0x30,
            0x30, 0x30, 0x00, 0x20, 0x20, 0x30, 0x20, 0x30, 0x20, 0x30, 0x31, 0x1f, 0x30, 0x30, 0x30, 0x00,
            0x20, 0x20, 0x30, 0x20, 0x30, 0x00, 0x31, 0x38, 0x2d, 0x33, 0x30, 0x2d, 0x31, 0x38, 0x2b, 0x31,
            0x34, 0x3a, 0x71, 0x75, 0x61, 0xff, 0xff, 0xd1, 0x5f, 0x4e, 0x00, 0x38,
        ],
        [
            0xf7, 0xff, 0x7a, 0x32, 0x3f, 0xc4, 0x33, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
            0xff, 0x66, 0x69, 0x6c, 0x3a, 0x2f, 0x2f, 0x7e, 0x3c, 0x3c, 0x3c, 0x3a, 0x2f, 0x2f, 0x78, 0x2f,
            0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a,
            0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x3c, 0x3c, 0x3c, 0x7c, 0x52, 0x61, 0x6e, 0x67, 0x65, 0x9a,
            0x3c, 0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x3c,
            0x3c, 0x3c, 0x7c, 0x9a, 0x9a, 0x71, 0xff, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
            0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0xff, 0x66,
            0x69, 0x6c, 0x3a, 0x2f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x3c, 0x3c,
            0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c, 0x9a, 0x3c, 0x3c, 0x7c, 0x3c,
            0x3c, 0x3c, 0x7c, 0x52, 0x61, 0x6e, 0x67, 0x65, 0x9a, 0x3c, 0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23,
            0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x3c, 0x3c, 0x3c, 0x7c, 0x9a, 0x9a, 0x71, 0xff,
            0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
            0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0xff, 0x66, 0x69, 0x6c, 0x3a, 0x2f, 0x9a, 0x9a, 0x3c,
            0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x3c, 0x3c,
            0x3c, 0x7c, 0x9a, 0x9a, 0x71, 0xff, 0xff, 0x66, 0x69, 0x6c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a,
            0x3f, 0x9a, 0x9a, 0x3c, 0x3c, 0x7c, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a, 0x9a, 0x3c,
            0x3c, 0x7c, 0x3c, 0x3c, 0x3c, 0x7c, 0x9a, 0x9a, 0x2f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7a, 0x3f, 0x9a,
            0x9a, 0x3c, 0x3c, 0x7c, 0xb1, 0x2b, 0x00, 0x00, 0x78, 0x2f, 0x79, 0x23, 0x2f, 0x7a, 0x3f, 0x9a,
            0x9a, 0x3c, 0x3c, 0x7c, 0x3c, 0x3c, 0x3c, 0x7c, 0x9a, 0x9a, 0x71, 0x26,
        ],
    ]

    @Test("fuzzer findings are idempotent", arguments: fuzzFindings)
    func fuzzFinding(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let reason = Grouping.normalize(reason: text)
        #expect(Grouping.normalize(reason: reason) == reason)
        let frame = Grouping.normalize(frame: text)
        #expect(Grouping.normalize(frame: frame) == frame)
    }

    /// Each dropped `+ 0` used to leave a `+` before the next number, one more pass per link:
    /// a chain longer than the pass limit was not idempotent. One pass now drops it all.
    @Test("a chain of plain + before numbers is dropped in one pass", arguments: ["+", "+ "])
    func plusChain(_ plus: String) {
        let chain = "f " + String(repeating: plus, count: 100) + String(repeating: " 0", count: 100) + " 7 end"
        let frame = Grouping.normalize(frame: chain)
        #expect(frame == "f 7 end")
        #expect(Grouping.normalize(frame: frame) == frame)
        #expect(Grouping.normalize(frame: "0x? ++ 5 6") == "0x? + 6")
        #expect(Grouping.normalize(frame: "f (++ 1 2") == "f (+ 2")
    }

    /// A URL fragment dropped before the next one: each pass shortened the chain by one
    /// link. Past 32 passes the text is grouped by its words, which is a fixed point.
    @Test("inputs that do not converge fall back to their words")
    func nonConverging() {
        let chain = "fil://~<<<://x/y" + String(repeating: "<|a/b#c", count: 50)
        let reason = Grouping.normalize(reason: chain)
        #expect(reason.hasPrefix("fil x y a b a b"))
        #expect(Grouping.normalize(reason: reason) == reason)
        for frame in [false, true] {
            let text = frame ? Grouping.normalize(frame: "<unnormalizable>") : Grouping.normalize(reason: "<unnormalizable>")
            #expect(text == "<unnormalizable>")
        }
    }

    @Test("random bytes decoded as UTF-8 (invalid sequences, lone surrogates) never trap")
    func randomBytes() {
        var rng = SplitMix64(seed: 0x5EED_0002)
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...300, using: &rng)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = String(decoding: bytes, as: UTF8.self)
            let reason = Grouping.normalize(reason: text)
            #expect(Grouping.normalize(reason: reason) == reason)
            let frame = Grouping.normalize(frame: text)
            #expect(Grouping.normalize(frame: frame) == frame)
            _ = Grouping.signature(kind: .signal, reason: text, stack: [text, text], fingerprint: nil, version: .v1)
        }
        // UTF-16 with lone surrogates, decoded the lossy way.
        let units: [UInt16] = [0xD800, 0x41, 0xDC00, 0x30, 0x78, 0x31, 0xDBFF]
        let lossy = String(decoding: units, as: UTF16.self)
        #expect(Grouping.normalize(reason: lossy) == "\u{FFFD}A\u{FFFD}0x?\u{FFFD}")
    }

    @Test("huge inputs normalize to their short forms")
    func hugeInputs() {
        let megabyte = 1 << 20
        #expect(Grouping.normalize(reason: String(repeating: "7", count: megabyte)) == "<n>")
        #expect(Grouping.normalize(frame: String(repeating: "7", count: megabyte)).utf8.count == megabyte)
        #expect(Grouping.normalize(reason: String(repeating: "\u{0}", count: megabyte)) == "")
        #expect(Grouping.normalize(reason: "0x" + String(repeating: "f", count: megabyte)) == "0x?")
    }

    /// The pathological megabyte texts of ``degenerateInputs(_:)``, by the piece each repeats
    /// and its count: a test case each, so that they run side by side.
    static let pathological: [(piece: String, count: Int)] = [
        ("<A 0x1;", (1 << 20) / 7),  // unmatched object descriptions
        ("a.", (1 << 20) / 2),  // e-mail local part that never meets @
        ("1.", (1 << 20) / 2),  // dotted numbers
        ("<", 1 << 20),
        ("a@b.", (1 << 20) / 4),
        ("\n", 1 << 20),
        ("3 Demo 0x0000000100a1b2c3 -[A b] + 44\n", (1 << 20) / 40),
    ]

    @Test("huge and degenerate inputs: linear time, no trap", arguments: pathological.indices)
    func degenerateInputs(_ index: Int) {
        let (piece, count) = Self.pathological[index]
        let text = String(repeating: piece, count: count)
        let clock = ContinuousClock()
        let start = clock.now
        let reason = Grouping.normalize(reason: text)
        _ = Grouping.normalize(frame: text)
        #expect(Grouping.normalize(reason: reason) == reason)
        #expect(clock.now - start < .seconds(20), "\(text.prefix(12).debugDescription)")
    }

    @Test("the empty reason and white space normalize to the empty string")
    func empty() {
        #expect(Grouping.normalize(reason: "") == "")
        #expect(Grouping.normalize(reason: " \t\n\r\n ") == "")
        #expect(Grouping.normalize(frame: "") == "")
        #expect(Grouping.signature(kind: .custom, reason: "", stack: nil, fingerprint: nil, version: .v1).title == "")
    }

    @Test("the signature changes whenever the kind changes")
    func kindChangesSignature() {
        let reasons = ["boom", "", "index 5 beyond bounds [0 .. 2]"]
        for reason in reasons {
            for stack in [nil, ["0 Demo 0x1 main + 1"]] as [[String]?] {
                for fingerprint in [nil, ["a"], ["a", "b"]] as [[String]?] {
                    let hashes = ReportKind.allCases.map {
                        Grouping.signature(kind: $0, reason: reason, stack: stack, fingerprint: fingerprint, version: .v1).hash
                    }
                    #expect(Set(hashes).count == ReportKind.allCases.count)
                }
            }
        }
    }

    @Test("the signature changes whenever any fingerprint part changes")
    func fingerprintPartChangesSignature() {
        var rng = SplitMix64(seed: 0x5EED_0003)
        for _ in 0..<2_000 {
            let count = Int.random(in: 1...8, using: &rng)
            var parts = (0..<count).map { _ in Self.randomText(&rng) }
            let kind = ReportKind.allCases.randomElement(using: &rng)!
            let base = Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: parts, version: .v1).hash
            let index = Int.random(in: 0..<count, using: &rng)
            let original = parts[index]
            // Any change, even one that normalization would erase, is a different group.
            let variants = [original + "x", original + " ", String(original.dropLast()), "", original + "\u{0}"]
            for variant in variants where variant != original {
                parts[index] = variant
                let changed = Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: parts, version: .v1).hash
                #expect(changed != base)
            }
            parts[index] = original
            // Adding, removing or splitting parts changes it too.
            if count < 8 {
                #expect(Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: parts + [""], version: .v1).hash != base)
            }
            if count > 1 {
                #expect(Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: Array(parts.dropLast()), version: .v1).hash != base)
            }
            if original.count > 1 {
                var split = parts
                split[index] = String(original.prefix(1))
                split.insert(String(original.dropFirst()), at: index + 1)
                #expect(Grouping.signature(kind: kind, reason: "r", stack: nil, fingerprint: split, version: .v1).hash != base)
            }
        }
    }
}
