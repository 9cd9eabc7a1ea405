import CrashWire
import SeededRandom
import Testing

@testable import CrashGrouping

/// The speed work of issue 18 (see `docs/grouping.md`, "Speed") changed how the module
/// computes, never what: each shortcut here is checked against the plain computation it
/// replaces, on the inputs that reach its edges.
@Suite("Fast paths")
struct FastPathTests {
    // MARK: - The fixed-point shortcut

    static func pass(_ text: String, frameMode: Bool, rules: NormalizerRules = .v2) -> String {
        var text = text
        return text.withUTF8 { src in
            var out = OutputBuffer(capacity: src.count + 64)
            defer { out.release() }
            Normalizer.pass(src, frameMode: frameMode, rules: rules, into: &out)
            return String(decoding: out.bytes, as: UTF8.self)
        }
    }

    static func isFixedPoint(_ text: String, frameMode: Bool) -> Bool {
        var text = text
        return text.withUTF8 { Normalizer.isFixedPoint($0, frameMode: frameMode) }
    }

    /// Pieces that reach the shortcut's edges: the property tests' pieces, and what a
    /// normalized text is made of.
    static let pieces: [String] =
        PropertyTests.pieces + [
            "<n>", "<uuid>", "<time>", "0x? ", " 0x?", "code=", "Code=-", "signal ", "line ", "#", "new", "old", " = <v>;", "Users/",
            "/home/", ".swift", ":", "://", "?a=", "&b=", "#x", "[", "1", "12", "250", "ms", "Demo ", "frame #", "* ", "[ra]", "+ ", "+",
            "(", ")", "]", "[0x1f]", "deadbeef-", "e3b0c44298fc1c14", "1.2.", "12:", "2026-", "x", " ", "\n", "@", "é",
        ]

    @Test("the fixed-point shortcut accepts no text a pass changes", arguments: [false, true])
    func fixedPointIsSound(frameMode: Bool) {
        var rng = SplitMix64(seed: frameMode ? 0x5EED_0181 : 0x5EED_0180)
        var accepted = 0
        var wrong: [String] = []
        func check(_ text: String) {
            guard Self.isFixedPoint(text, frameMode: frameMode) else { return }
            accepted += 1
            for rules in [NormalizerRules.v1, .v2] where Self.pass(text, frameMode: frameMode, rules: rules) != text {
                wrong.append(text)
            }
        }
        for _ in 0..<20_000 {
            let count = Int.random(in: 1...12, using: &rng)
            var text = ""
            for _ in 0..<count { text += Self.pieces.randomElement(using: &rng)! }
            check(text)
            check(Self.pass(text, frameMode: frameMode))  // what the shortcut is asked about
        }
        for c in Corpus.cases + Corpus.casesV2 {
            check(c.input)
            check(c.expected)
        }
        #expect(wrong.isEmpty, "accepted but changed by a pass: \(wrong.prefix(5).map(\.debugDescription))")
        #expect(accepted > 1_000, "the shortcut should accept most normalized texts, accepted \(accepted)")
    }

    @Test(
        "texts a pass changes are left to the confirmation pass",
        arguments: [
            ("a 0x? 0x?", false), ("code 12 x 12", false), ("a  b", false), (" a", false), ("a ", false), ("at 0x1f", false),
            ("at 0X?", false), ("http://h/p?a=1", false), ("http://h/p#f", false), ("Demo[12:34] x", false), ("/Users/bob/x", false),
            ("File.swift:12 x", false), ("new = 3;", false), ("a@b.co", false), ("2026-11-21", false), ("at 1.2.3.4", false),
            ("deadbeefdeadbeef1", false), ("8F0E1C9A-1234-4ABC-9DEF-0123456789AB", false), ("a\tb", false), ("a\r\nb", false),
            ("\na", false), ("a\n", false), ("x-1", false), ("took 250ms", false), ("3 Demo foo", true), ("#3 Demo", true),
            ("frame #0: foo", true), ("* foo", true), ("[ra] foo", true), ("foo + 12", true), ("line 12", true),
        ])
    func fixedPointRejects(_ text: String, _ frameMode: Bool) {
        #expect(Self.pass(text, frameMode: frameMode) != text, "a pass changes it")
        #expect(!Self.isFixedPoint(text, frameMode: frameMode))
    }

    @Test(
        "typical normalized reasons and frames need no confirmation pass",
        arguments: [
            (
                "-[FeedViewController configure:]: unrecognized selector sent to instance 0x? (guarded, session <uuid>) [guard: FeedViewController on main queue]",
                false
            ),
            ("*** -[__NSArrayI objectAtIndex:]: index <n> beyond bounds [<n> .. <n>] in -[Student length] at <time>, thread <n>", false),
            (
                "Swift/ContiguousArrayBuffer.swift: Fatal error: Index out of range in Student.length (index <n>, count <n>); EXC_BREAKPOINT (code=1, subcode=0x?)",
                false
            ),
            (
                "Error Domain=NSURLErrorDomain Code=-1001 \"The request timed out.\" UserInfo={NSErrorFailingURLStringKey=https://api.example.com/v1/feed?page=&since=}",
                false
            ),
            ("Cannot remove an observer <ProfileCell> for the key path \"user.profile.name\" from <Demo.Model> because it is not registered", false),
            ("Demo -[FeedViewController tableView:cellForRowAtIndexPath:]", true), ("Demo closure #1 in FeedLoader.load(page:)", true),
            ("Demo $s4Demo14ViewControllerC11viewDidLoadyyF", true), ("level3() in bt at /src/bt.swift", true),
            ("handle (node_modules/express/lib/router/layer.js)", true), ("Demo 0x?", true),
        ])
    func fixedPointAccepts(_ text: String, _ frameMode: Bool) {
        #expect(Self.pass(text, frameMode: frameMode) == text)
        #expect(Self.isFixedPoint(text, frameMode: frameMode))
    }

    @Test("the fixed-point memo answers what the proof answers")
    func fixedPointMemo() {
        var rng = SplitMix64(seed: 0x5EED_0185)
        // More distinct texts than the memo has entries (so entries are replaced), each asked
        // several times in both modes, some longer than an entry holds.
        var texts: [String] = ["Demo 12", "#3 Demo", "3 Demo foo", "a b"]
        for _ in 0..<3_000 {
            var text = ""
            for _ in 0..<Int.random(in: 1...12, using: &rng) { text += Self.pieces.randomElement(using: &rng)! }
            texts.append(Self.pass(text, frameMode: Bool.random(using: &rng)))
        }
        texts.append(String(repeating: "abc ", count: 70))  // 280 bytes: proved every time
        var wrong: [String] = []
        func ask(_ text: String, _ frameMode: Bool) {
            var copy = text
            let memo = copy.withUTF8 { FixedPointMemo.isFixedPoint($0, frameMode: frameMode) }
            if memo != Self.isFixedPoint(text, frameMode: frameMode) { wrong.append("\(frameMode) \(text.debugDescription)") }
        }
        // A text proved in one mode is not a fixed point in the other: `12` is kept in a frame.
        ask("Demo 12", true)
        ask("Demo 12", false)
        for _ in 0..<30_000 {
            ask(texts.randomElement(using: &rng)!, Bool.random(using: &rng))
        }
        #expect(Self.isFixedPoint("Demo 12", frameMode: true) && !Self.isFixedPoint("Demo 12", frameMode: false))
        #expect(wrong.isEmpty, "the memo differs from the proof: \(wrong.prefix(5))")
    }

    // MARK: - Scratch buffers

    @Test("output longer than the scratch buffer moves to the heap intact")
    func outputGrows() {
        // `1` -> `<n>`: the output outgrows both the stack buffer and the input's size.
        for count in [10, 200, 400, 5_000] {
            let text = Array(repeating: "1", count: count).joined(separator: " ")
            let expected = Array(repeating: "<n>", count: count).joined(separator: " ")
            #expect(Grouping.normalize(reason: text) == expected)
            #expect(Grouping.normalize(reason: "x " + text, version: .v2) == "x " + expected)
        }
    }

    // MARK: - Byte scans, eight bytes at a time

    /// Random bytes with runs of what the scans look for.
    static func randomBytes(_ rng: inout SplitMix64) -> [UInt8] {
        let alphabet: [UInt8] = Array(" \t\n\r@/_$-.,:0123456789azAZ".utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xA9, 0xFF]
        return (0..<Int.random(in: 0...40, using: &rng)).map { _ in
            Int.random(in: 0..<4, using: &rng) == 0 ? UInt8.random(in: 0...255, using: &rng) : alphabet.randomElement(using: &rng)!
        }
    }

    @Test("the word-at-a-time scans find what a byte loop finds")
    func byteScans() {
        var rng = SplitMix64(seed: 0x5EED_0182)
        for _ in 0..<5_000 {
            let bytes = Self.randomBytes(&rng)
            bytes.withUnsafeBufferPointer { buffer in
                guard let p = buffer.baseAddress else { return }
                let n = buffer.count
                for k in 0...n {
                    var end = k
                    var hasAt = false
                    while end < n && bytes[end] != Bytes.newline && bytes[end] != Bytes.carriageReturn {
                        hasAt = hasAt || bytes[end] == UInt8(ascii: "@")
                        end += 1
                    }
                    let line = Bytes.lineEnd(p, from: k, to: n)
                    #expect(line.end == end && line.hasAt == hasAt, "lineEnd \(bytes) from \(k)")
                    #expect(Bytes.skipSpaces(p, k, n) == (k..<n).first { !Bytes.isSpace(bytes[$0]) } ?? max(k, n), "\(bytes) \(k)")
                    #expect(Bytes.tokenEnd(p, k, n) == (k..<n).first { Bytes.isSpace(bytes[$0]) } ?? max(k, n), "\(bytes) \(k)")
                    #expect(Bytes.asciiWordEnd(p, k, n) == (k..<n).first { !Bytes.isASCIIWord(bytes[$0]) } ?? max(k, n), "\(bytes) \(k)")
                    let slash = (0..<k).last { bytes[$0] == UInt8(ascii: "/") }.map { $0 + 1 } ?? 0
                    #expect(Bytes.afterLast(UInt8(ascii: "/"), p, 0, k) == slash, "\(bytes) \(k)")
                    #expect(Bytes.equal(p, p + k, n - k) == (bytes[0..<(n - k)] == bytes[k...]), "\(bytes) \(k)")
                }
                let oneLine = bytes.allSatisfy { $0 < 0x80 && $0 != Bytes.newline && $0 != Bytes.carriageReturn }
                #expect(Bytes.isOneASCIILine(buffer) == oneLine, "\(bytes)")
            }
        }
    }

    @Test("the error-code filter lets every error-code word through")
    func errorCodeFilter() {
        for word in Keywords.errorCodeWords {
            let bytes = Array(UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount))
            for text in [bytes, bytes.map { $0 &- 0x20 }] {  // lowercase and uppercase
                #expect(text.withUnsafeBufferPointer { Keywords.isErrorCodeKeyword($0, 0, $0.count) }, "\(word)")
            }
        }
    }

    // MARK: - Frame classification

    /// Frames of every shape, many sharing an image (the memo's case), some with images of
    /// more than 30 bytes and more images than the memo keeps.
    static func randomFrame(_ rng: inout SplitMix64) -> String {
        let images = [
            "Shop", "UIKitCore", "CoreFoundation", "libswiftCore.dylib", "libobjc.A.dylib", "CrashGuard", "ShopKit", "libsystem_c.dylib",
            "dyld", "???", "AVeryLongVendoredFrameworkNameThatGoesOnAndOn", "Foundation", "libCrashGuardObjC.dylib", "fmt",
            // More than the image memo keeps (16): older names are replaced.
            "libc.so.6", "Photos", "ShopUI", "node", "django", "WebKit", "libdispatch.dylib", "CrashGuard.framework",
        ]
        let symbols = [
            "-[A b]", "__exceptionPreprocess", "abort", "main", "Shop.Cart.total()", "closure #1 in f()", "swift_dynamicCastFailure",
            "CrashGuard.GuardRecorder.record()", "0x100a00000",
        ]
        let image = images.randomElement(using: &rng)!
        let symbol = symbols.randomElement(using: &rng)!
        let index = Int.random(in: 0...40, using: &rng)
        let mark = ["", "", "", " [app]", " [system]"].randomElement(using: &rng)!
        switch Int.random(in: 0..<6, using: &rng) {
        case 0:
            let padding = String(repeating: " ", count: max(1, 30 - image.utf8.count))
            return "\(index)   \(image)\(padding) 0x00000001a0b2c3d4 \(symbol) + 12\(mark)"
        case 1: return "\(index) \(image) 0x1 \(symbol)\(mark)"
        case 2: return "\(index) [ra] 0x00007f0011223344 \(symbol) + 300 in \(image)\(mark)"
        case 3: return "frame #\(index): 0x0000000100003f2c \(image)`\(symbol) at main.swift:12:5\(mark)"
        case 4: return "\(symbol) (\(image))\(mark)"
        default: return "/usr/lib/\(image)(\(symbol)+0x12)[0x7f8740e21bb0]\(mark)"
        }
    }

    @Test("frame selection with its image memo picks what frame-by-frame classification picks")
    func selectionMatchesClassification() {
        var rng = SplitMix64(seed: 0x5EED_0183)
        for _ in 0..<3_000 {
            let stack = (0..<Int.random(in: 0...30, using: &rng)).map { _ in Self.randomFrame(&rng) }
            var app: [(index: Int, length: Int)] = []
            var fallback: [(index: Int, length: Int)] = []
            for (index, frame) in stack.enumerated() where app.count < 3 {
                let (role, length) = FrameClassifier.classify(frame)
                if role == .app { app.append((index, length)) }
                if role == .system && fallback.count < 3 { fallback.append((index, length)) }
            }
            let expected = app.isEmpty ? fallback : app
            let selected = Grouping.signatureFrames(stack)
            #expect(selected.map(\.index) == expected.map(\.index) && selected.map(\.length) == expected.map(\.length), "\(stack)")
        }
    }

    /// Whether `text` matches `pattern` (`*` stands for any text), the plain way.
    static func matches(_ text: [UInt8], _ pattern: String) -> Bool {
        let parts = pattern.split(separator: "*", omittingEmptySubsequences: false).map { Array($0.utf8) }
        guard parts.count > 1 else { return text == parts[0] }
        let head = parts[0]
        let tail = parts[parts.count - 1]
        guard text.count >= head.count + tail.count, text.starts(with: head), text.reversed().starts(with: tail.reversed()) else {
            return false
        }
        // `*infix*` (the only pattern with a middle part in `FrameTable`).
        var from = head.count
        for middle in parts.dropFirst().dropLast() where !middle.isEmpty {
            let limit = text.count - tail.count - middle.count
            guard limit >= from, let at = (from...limit).first(where: { text[$0..<($0 + middle.count)].elementsEqual(middle) }) else {
                return false
            }
            from = at + middle.count
        }
        return true
    }

    @Test("pattern sets, with the infix filter, match what a plain matcher matches")
    func patternSets() {
        var rng = SplitMix64(seed: 0x5EED_0186)
        let lists = [FrameTable.machinerySymbols, FrameTable.machineryImages, FrameTable.systemImages, FrameTable.systemPaths]
        for patterns in lists {
            let set = PatternSet(patterns)
            // Texts made of the patterns' own pieces (whole infixes at every offset, cut ones,
            // near misses) and random words.
            let pieces = patterns.flatMap { $0.split(separator: "*").map(String.init) } + ["a", "Z", "_", ".", "/", " ", "10", "Guard"]
            for _ in 0..<20_000 {
                var text = ""
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    let piece = pieces.randomElement(using: &rng)!
                    let cut = Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 0...piece.utf8.count, using: &rng) : piece.utf8.count
                    text += String(decoding: Array(piece.utf8).prefix(cut), as: UTF8.self)
                }
                let bytes = Array(text.utf8)
                let expected = patterns.contains { Self.matches(bytes, $0) }
                #expect(bytes.withUnsafeBufferPointer { set.matches($0[...]) } == expected, "\(text.debugDescription)")
            }
        }
    }

    @Test("an Apple frame reads alike whether its index takes the fast path or the general one")
    func appleFrameFastPath() {
        var rng = SplitMix64(seed: 0x5EED_0184)
        for _ in 0..<3_000 {
            let frame = Self.randomFrame(&rng)
            guard let first = frame.utf8.first, Bytes.isDigit(first) else { continue }
            // `#3 ...` is read by the general index loop, and stands for the same frame.
            #expect(FrameClassifier.classify(frame).role == FrameClassifier.classify("#" + frame).role, "\(frame)")
        }
    }

    // MARK: - The Apple-frame shortcut

    /// Symbols that reach the shortcut's edges: addresses and pluses at the end, offsets of
    /// unsymbolicated frames, KVO change values, e-mail addresses, URLs, object descriptions,
    /// keywords that arm a number, line breaks, repeated white space.
    static let symbolPieces: [String] =
        PropertyTests.pieces + [
            "-[A b:]", "+[NSObject foo]", "closure #1 in f()", "$s4Demo3fooyyF", "0x1f", "0x?", "+", "+ 12", "+12", "new = ", "old = 3;",
            "a@b.co", "http://h/p?a=1", "<Foo: 0x12>", "<Foo 0x12;", "code ", "line ", "status ", "File.swift:12", "\n", "  ", "=",
            "deadbeefdeadbeef", "8F0E1C9A-1234-4ABC-9DEF-0123456789AB", "2026-11-21", "12:34", "1.2.3.4", "(", ")", "é",
        ]

    static func randomAppleFrame(_ rng: inout SplitMix64) -> String {
        let images = [
            "Demo", "UIKitCore", "libc++abi.dylib", "libswiftCore.dylib", "code", "line", "new", "Demo-Beta", "my_app", "e3b0c442",
            "Demo(x)", "a@b", "0x12", "3", "frameworks", "Ünicode",
        ]
        // Half plain symbols, half with pieces that reach the edges.
        var symbol = [
            "-[FeedViewController tableView:cellForRowAtIndexPath:]", "closure #1 in FeedLoader.load(page:)", "$s4Demo3fooyyF",
            "specialized Array.subscript.getter", "std::__1::vector<int>::at(unsigned long)", "main", "__CFRunLoopRun",
        ].randomElement(using: &rng)!
        for _ in 0..<Int.random(in: 0...3, using: &rng) where Bool.random(using: &rng) {
            let piece = Self.symbolPieces.randomElement(using: &rng)!
            symbol = Bool.random(using: &rng) ? symbol + piece : piece + symbol
        }
        let image = images.randomElement(using: &rng)!
        let padding = String(repeating: " ", count: Int.random(in: 1...30, using: &rng))
        let address = ["0x00000001a0b2c3d4", "0x1", "0x", "0xZZ", "0x1f2e"].randomElement(using: &rng)!
        let offset = ["", " + 44", " + 0x2c", " +44", "  +   12  ", " + ", " + 4 4", " + x", " - 12", "\n+ 1", " + 12@"].randomElement(
            using: &rng)!
        let index = ["3", "12", "0", "#3", "x"].randomElement(using: &rng)!
        return "\(index)\(padding)\(image)\(padding) \(address) \(symbol)\(offset)"
    }

    @Test("the Apple-frame shortcut writes what a pass writes")
    func appleFrameShortcut() {
        var rng = SplitMix64(seed: 0x5EED_0187)
        var accepted = 0
        var wrong: [String] = []
        for _ in 0..<30_000 {
            let frame = Self.randomAppleFrame(&rng)
            let bytes = Array(frame.utf8)
            let shortcut: String? = bytes.withUnsafeBufferPointer { src in
                guard let (image, symbol) = Normalizer.appleFrameParts(src) else { return nil }
                return String(decoding: src[image], as: UTF8.self) + " " + String(decoding: src[symbol], as: UTF8.self)
            }
            // `Grouping` uses the shortcut's text only when it is a fixed point.
            guard let shortcut, Self.isFixedPoint(shortcut, frameMode: true) else { continue }
            accepted += 1
            if Grouping.normalize(frame: frame, version: .v2) != shortcut { wrong.append(frame) }
        }
        #expect(wrong.isEmpty, "the shortcut differs from a pass: \(wrong.prefix(5).map(\.debugDescription))")
        #expect(accepted > 1_000, "the shortcut should take the plain Apple frames, took \(accepted)")
    }

    @Test(
        "frames a rule reads past the symbol are left to the pass",
        arguments: [
            "3 Demo 0x1 foo 0x1f + 12", "3 Demo 0x1 foo 0x? + 12", "3 Demo 0x1 + 12", "3 Demo 0x1 foo + + 12", "3 Demo 0x1 a@b.co + 1",
            "3 Demo 0x1 foo + 12 x", "3 Demo 0x1 foo\n+ 12", "3 Demo 0x foo + 12", "3 Demo(x) 0x1 foo + 12", "3 Demo 0x1fz foo",
        ])
    func appleFrameShortcutDeclines(_ frame: String) {
        let parts = Array(frame.utf8).withUnsafeBufferPointer { Normalizer.appleFrameParts($0) }
        #expect(parts == nil)
    }

    @Test("a plain Apple frame takes the shortcut")
    func appleFrameShortcutTakes() {
        let frame = "3   Demo                           0x0000000100a1b2c3 -[FeedViewController tableView:cellForRowAtIndexPath:] + 44"
        let bytes = Array(frame.utf8)
        let text = bytes.withUnsafeBufferPointer { src in
            Normalizer.appleFrameParts(src).map {
                String(decoding: src[$0.image], as: UTF8.self) + " " + String(decoding: src[$0.symbol], as: UTF8.self)
            }
        }
        #expect(text == "Demo -[FeedViewController tableView:cellForRowAtIndexPath:]")
        #expect(Grouping.normalize(frame: frame, version: .v2) == text)
    }
}
