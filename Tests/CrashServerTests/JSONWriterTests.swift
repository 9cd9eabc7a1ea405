import Foundation
import Testing

@testable import CrashServer

@Suite struct JSONWriterTests {
    @Test func writesTextFoundationReadsBack() throws {
        let tricky = "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} nul-free ü 漢字 🚀 </script>"
        let text = JSONWriter.rows([1, 2], capacity: 64) { w, n in
            w.key("n")
            w.number(Int64(n))
            w.raw(",")
            w.key("s")
            w.string(tricky)
            w.raw(",")
            w.key("none")
            w.string(nil as String?)
            w.raw(",")
            w.key("b")
            w.bool(n == 1 ? true : nil)
            w.raw(",")
            w.key("a")
            w.strings(["x", "\"y\""])
            w.raw(",")
            w.key("o")
            w.object(["k\"": "v\n"])
            w.raw(",")
            w.key("d")
            w.date(Date(timeIntervalSince1970: 1_795_255_200.25))
        }
        let parsed = try #require(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
        #expect(parsed.count == 2)
        #expect(parsed[0]["n"] as? Int == 1)
        #expect(parsed[0]["s"] as? String == tricky)
        #expect(parsed[0]["none"] is NSNull)
        #expect(parsed[0]["b"] as? Bool == true)
        #expect(parsed[1]["b"] is NSNull)
        #expect(parsed[0]["a"] as? [String] == ["x", "\"y\""])
        #expect(parsed[0]["o"] as? [String: String] == ["k\"": "v\n"])
        #expect(parsed[0]["d"] as? String == "2026-11-21T10:00:00.25Z")
    }
}
