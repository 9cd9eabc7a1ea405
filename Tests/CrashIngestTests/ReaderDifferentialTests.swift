import CrashCompression
import CrashWire
import Foundation
import SeededRandom
import Testing

@testable import CrashIngest

/// The streaming reader against the `JSONDecoder` path it replaced: on generated bodies,
/// the same verdict (status; for 202 every report's value or rejection message), whole or
/// fed in small chunks.
@Suite struct ReaderDifferentialTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test(arguments: 0..<8)
    func generatedBodiesGetTheSameVerdict(_ seed: Int) {
        var generator = BodyGenerator(rng: SplitMix64(seed: UInt64(seed) &* 7919), now: now)
        var disagreements = 0
        for n in 0..<300 {
            let body = generator.body()
            let old = Verdict.legacy(body, now: now)
            let new = Verdict.streaming(body, now: now)
            let agree: Bool
            switch (old, new) {
            case (.refused(let a, _), .refused(let b, _)): agree = a == b
            default: agree = old == new
            }
            if !agree {
                disagreements += 1
                if disagreements <= 3 {
                    Issue.record("seed \(seed) body \(n): old \(old) new \(new)\n\(String(decoding: body.prefix(3000), as: UTF8.self))")
                }
            }
            // Chunk boundaries anywhere give the same verdict.
            if n % 10 == 0 {
                let chunked = Verdict.streaming(body, now: now, chunk: 1 + n % 7)
                #expect(chunked == new, "seed \(seed) body \(n) chunked")
            }
        }
        #expect(disagreements == 0)
    }

    /// Single defects, each compared with the old decoder.
    @Test(arguments: [
        #"{"reports":[{"id":1}]}"#,
        #"{"reports":[{"stack":"x"}]}"#,
        #"{"reports":[{"stack":{}}]}"#,
        #"{"reports":[{"context":"x"}]}"#,
        #"{"reports":[{"context":[]}]}"#,
        #"{"reports":[{"app":"x"}]}"#,
        #"{"reports":[{"app":[]}]}"#,
        #"{"reports":[{"device":"x"}]}"#,
        #"{"reports":[{"fatal":"yes"}]}"#,
        #"{"reports":[null, 1, "x", [], true]}"#,
        #"{"reports":null}"#,
        #"{"reports":{}}"#,
        #"{"reports":[]}"#,
        #"{"report":[]}"#,
        #"[1,2]"#,
        #""hello""#,
        "hello",
        "",
        "  ",
        #"{"reports":[1]} x"#,
        #"{"reports":[1e+5, -0.5E-3, 0, -0]}"#,
        #"{"reports":[tru]}"#,
        #"{"reports":["\u00e9\/\b\f\n\r\t\"\\"]}"#,
        #"{"rep\u006frts":[1]}"#,
    ])
    func singleDefectsGetTheSameVerdict(_ text: String) {
        let body = Array(text.utf8)
        let old = Verdict.legacy(body, now: now)
        let new = Verdict.streaming(body, now: now)
        switch (old, new) {
        case (.refused(let a, _), .refused(let b, _)): #expect(a == b, "old \(old) new \(new)")
        default: #expect(old == new)
        }
    }

    /// Not JSON by RFC 8259, which the old decoder let through as a rejected report (it
    /// checked an element's syntax only when it decoded it): now 400 like any other bad body.
    @Test(arguments: [
        #"{"reports":[1],}"#, #"{"reports":[01]}"#, #"{"reports":[1.]}"#, #"{"reports":[-]}"#, #"{"reports":[1e]}"#,
        #"{"reports":["\x"]}"#, #"{"reports":["\u12G4"]}"#, #"{"reports":[{"a":1,}]}"#,
    ])
    func grammarViolationsTheOldDecoderMissedAre400(_ text: String) {
        #expect(Verdict.legacy(Array(text.utf8), now: now).status == 202)
        #expect(Verdict.streaming(Array(text.utf8), now: now) == .refused(400, "body is not JSON"))
    }

    /// A raw control character gets the old message, offset included.
    @Test func controlCharacterMessageIsTheOldOne() {
        let body = Array(#"{"reports":[{"reason":"a"#.utf8) + [0x01] + Array(#"b"}]}"#.utf8)
        #expect(Verdict.streaming(body, now: now) == Verdict.legacy(body, now: now))
        #expect(Verdict.streaming(body, now: now).description.contains("U+0001 in a string at byte 24"))
    }
}
