import CrashGrouping
import CrashWire
import Foundation
import Testing

@testable import CrashIngest

/// A project's `patterns` (data-protection.md, "Optional text rules" and "Patterns are not a
/// denial of service"), and scrubbing in the `/v1/reports` reader before signing.
@Suite struct ScrubPatternsTests {
    static func scrubber(_ patterns: [String], _ settings: ScrubSettings = ScrubSettings()) throws -> ReportScrubber {
        ReportScrubber(settings: settings, patterns: try ScrubPatterns(patterns))
    }

    @Test("each match becomes [Filtered], in list order, case-sensitive unless (?i)")
    func matches() throws {
        let s = try Self.scrubber(["ord-[0-9]+", "(?i)acme-[a-z]+"])
        #expect(s.scrub(text: "order ord-123 and ORD-456, Acme-Widget") == "order [Filtered] and ORD-456, [Filtered]")
        #expect(s.scrub(text: "nothing here") == "nothing here")
    }

    @Test("patterns run after the defaults and before addresses; markers are never matched")
    func order() throws {
        let s = try Self.scrubber(["Filtered", "[0-9]+\\.[0-9]+"], ScrubSettings(scrubIPs: true))
        // The token's marker stays whole; the pattern takes the dotted number before the IP rule sees it.
        #expect(s.scrub(text: "token=abc at 10.1.2.3") == "token=[Filtered] at [Filtered].[Filtered]")
        // A match spanning a marker replaces only what is outside it.
        let around = try Self.scrubber(["x.*y"])
        #expect(around.scrub(text: "x1 [Filtered] 2y") == "[Filtered][Filtered][Filtered]")
    }

    @Test("empty matches are skipped")
    func emptyMatches() throws {
        #expect(try Self.scrubber(["a*"]).scrub(text: "bab") == "b[Filtered]b")
    }

    @Test("a pattern RE2 refuses is named; backreferences and look-around are not RE2")
    func invalid() throws {
        #expect(ScrubPatterns.problem(with: "ord-[0-9]+") == nil)
        for pattern in ["(unclosed", "(a)\\1", "(?=x)", "a{1001}"] {
            #expect(ScrubPatterns.problem(with: pattern) != nil, "\(pattern)")
        }
        #expect(throws: ScrubPatterns.Invalid.self) { try ScrubPatterns(["ok", "(bad"]) }
        #expect((try? ScrubPatterns(["ok", "(bad"])) == nil)
    }

    @Test("catastrophic patterns run in linear time on long text")
    func linear() throws {
        let s = try Self.scrubber(["(a+)+$", "(x+x+)+y", "(a|aa)*c"])
        let text = String(repeating: "a", count: 8192) + "!"
        let started = ContinuousClock.now
        #expect(s.scrub(text: text) == text)
        // A backtracking engine takes longer than the age of the universe here; RE2 a few ms.
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    @Test("a pattern that would search the text again and again runs out of its budget: the string is [Filtered] whole")
    func budget() throws {
        // Each match of `a` is found after reading to the end for `a.*b`: quadratic without a budget.
        let s = try Self.scrubber(["a.*b|a"])
        #expect(s.scrub(text: String(repeating: "a", count: 8192)) == "[Filtered]")
        // A few matches in a short string stay within it.
        #expect(s.scrub(text: "xa ya") == "x[Filtered] y[Filtered]")
    }

    // MARK: - The reader

    static func body(_ reports: [[String: Any]]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: ["reports": reports]))
    }

    static func report(reason: String, stack: [String]? = nil, context: [String: String]? = nil) -> [String: Any] {
        var r: [String: Any] = [
            "id": UUID().uuidString, "timestamp": RFC3339.format(Date()), "kind": "exception", "reason": reason,
            "app": ["id": "com.example", "version": "1.0"],
        ]
        if let stack { r["stack"] = stack }
        if let context { r["context"] = context }
        return r
    }

    static func read(_ reports: [[String: Any]], scrubber: ReportScrubber?) throws -> IngestBatch {
        let reader = try IngestBodyReader(contentEncoding: nil, maxBodyBytes: .max, maxDecompressedBytes: 1 << 24)
        try reader.feed(body(reports))
        return try reader.finish(version: .v2, scrubber: scrubber)
    }

    @Test("/v1/reports scrubs before signing: two reports differing only by a card number are one signature")
    func readerSignsScrubbedText() throws {
        let a = Self.report(reason: "charge declined for 4111 1111 1111 1111", stack: ["0 App main + 1"])
        let b = Self.report(reason: "charge declined for 5555-5555-5555-4444", stack: ["0 App main + 1"])
        let plain = try Self.read([a, b], scrubber: nil)
        #expect(plain.accepted[0].signature.hash != plain.accepted[1].signature.hash)
        let batch = try Self.read([a, b], scrubber: ReportScrubber())
        #expect(batch.accepted[0].signature.hash == batch.accepted[1].signature.hash)
        #expect(batch.accepted.allSatisfy { $0.scrubbed && $0.report.reason == "charge declined for [Filtered]" })
        // Frames untouched: still the body's own text.
        #expect(batch.accepted[0].stackJSON != nil && batch.accepted[0].report.stack == nil)
    }

    @Test("a scrubbed frame is stored and signed as scrubbed; an unchanged report is not marked")
    func readerScrubsFrames() throws {
        let secret = Self.report(
            reason: "fetch failed", stack: ["0 App fetch + 1", "url https://bob:s3cret@example.com/x?token=abc\\u0041", "2 App main"],
            context: ["password": "hunter2", "user": "ana"])
        let twin = Self.report(
            reason: "fetch failed", stack: ["0 App fetch + 1", "url https://bob:other@example.com/x?token=zzz", "2 App main"])
        let clean = Self.report(reason: "index 5 beyond bounds", stack: ["0 App main"], context: ["user": "ana"])
        let batch = try Self.read([secret, twin, clean], scrubber: ReportScrubber())
        let first = batch.accepted[0]
        #expect(first.scrubbed && first.stackJSON == nil)
        #expect(
            first.report.stack == [
                "0 App fetch + 1", "url https://bob:[Filtered]@example.com/x?token=[Filtered]", "2 App main",
            ])
        #expect(first.report.context == ["password": "[Filtered]", "user": "ana"])
        #expect(first.signature.hash == batch.accepted[1].signature.hash)
        #expect(!batch.accepted[2].scrubbed && batch.accepted[2].stackJSON != nil)
    }
}
