import CrashWire
import Foundation
import Testing

@Suite struct RFC3339Tests {
    @Test func parsesUTCAndFractions() throws {
        let date = try #require(RFC3339.parse("2026-11-21T10:00:00Z"))
        #expect(date.timeIntervalSince1970 == 1_795_255_200)
        let frac = try #require(RFC3339.parse("2026-11-21T10:00:00.250Z"))
        #expect(frac.timeIntervalSince1970 == 1_795_255_200.25)
    }

    @Test func appliesOffsets() throws {
        let a = try #require(RFC3339.parse("2026-11-21T12:30:00+02:30"))
        #expect(a.timeIntervalSince1970 == 1_795_255_200)
    }

    @Test(arguments: [
        "", "2026-11-21", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-21T10:00:00", "2026-11-21T10:00:00Zjunk", "2026-11-21T10:00:00.Z",
        "2026-11-21T24:00:00Z",
    ])
    func rejectsMalformed(_ text: String) {
        #expect(RFC3339.parse(text) == nil)
    }

    @Test func formatsRoundTrip() throws {
        for text in ["1970-01-01T00:00:00Z", "2026-11-21T10:00:00Z", "2024-02-29T23:59:59.5Z", "2026-11-21T10:00:00.123456Z"] {
            let date = try #require(RFC3339.parse(text))
            #expect(RFC3339.format(date) == text)
        }
    }
}
