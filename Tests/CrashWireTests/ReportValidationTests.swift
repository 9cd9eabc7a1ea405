import CrashWire
import Foundation
import Testing

@Suite struct ReportValidationTests {
    let now = Date(timeIntervalSince1970: 1_795_255_200)

    func report(_ edit: (inout Report) -> Void = { _ in }) -> Report {
        var r = Report(timestamp: now, kind: .container, reason: "boom", app: AppInfo(id: "com.example", version: "1.0"))
        edit(&r)
        return r
    }

    @Test func validReportPasses() {
        #expect(report().validationError(now: now) == nil)
    }

    @Test func namesTheField() {
        #expect(report { $0.reason = "" }.validationError(now: now)?.hasPrefix("reason:") == true)
        #expect(report { $0.reason = String(repeating: "x", count: 8193) }.validationError(now: now)?.hasPrefix("reason:") == true)
        #expect(report { $0.reason = String(repeating: "x", count: 8192) }.validationError(now: now) == nil)
        #expect(report { $0.app.version = "" }.validationError(now: now)?.hasPrefix("app.version:") == true)
        #expect(report { $0.app.build = "" }.validationError(now: now)?.hasPrefix("app.build:") == true)
        #expect(report { $0.timestamp = now.addingTimeInterval(-31 * 86_400) }.validationError(now: now)?.hasPrefix("timestamp:") == true)
        #expect(report { $0.timestamp = now.addingTimeInterval(2 * 86_400) }.validationError(now: now)?.hasPrefix("timestamp:") == true)
        #expect(report { $0.stack = Array(repeating: "f", count: 257) }.validationError(now: now)?.hasPrefix("stack:") == true)
        #expect(report { $0.fingerprint = [] }.validationError(now: now)?.hasPrefix("fingerprint:") == true)
        #expect(
            report { $0.device = DeviceInfo(os: "", model: String(repeating: "m", count: 129)) }.validationError(now: now)?.hasPrefix("device.model:")
                == true)
        #expect(report { $0.context = ["k": "a\u{0}b"] }.validationError(now: now)?.hasPrefix("context[k]:") == true)
    }

    /// A NUL anywhere is found: in small (inline) and large strings, first and last byte,
    /// and in a stack frame past the first.
    @Test func findsNULAtEveryPosition() {
        let long = String(repeating: "frame ", count: 40)
        for text in ["\u{0}", "a\u{0}", "\u{0}a", "short\u{0}x", "\u{0}" + long, long + "\u{0}", long + "\u{0}" + long] {
            #expect(report { $0.reason = text }.validationError(now: now)?.hasPrefix("reason:") == true, "\(text.utf8.count) bytes")
            #expect(report { $0.stack = [long, text] }.validationError(now: now)?.hasPrefix("stack[1]:") == true)
        }
        #expect(report { $0.stack = [long, long + "é"] }.validationError(now: now) == nil)
    }

    /// Found by FuzzIngest: two bad context entries named whichever a dictionary's (per
    /// instance) order gave first, so one body got two different answers.
    @Test func contextErrorNamesTheSmallestBadKey() {
        var messages = Set<String?>()
        for extra in 0..<40 {
            var context = Dictionary(uniqueKeysWithValues: (0..<extra).map { ("ok\($0)", "v") })
            context["zz"] = "a\u{0}b"
            context["b"] = String(repeating: "x", count: 5_000)
            context["m"] = "also\u{0}bad"
            messages.insert(report { $0.context = context }.validationError(now: now))
        }
        #expect(messages.count == 1)
        #expect(messages.first??.hasPrefix("context[b]:") == true)
    }

    @Test func deviceFieldsMayBeEmpty() {
        #expect(report { $0.device = DeviceInfo(os: "", osVersion: "", model: "", id: "") }.validationError(now: now) == nil)
    }

    @Test func versionsCompareNumerically() {
        #expect(AppVersion.less("1.4.0", "1.10.0"))
        #expect(AppVersion.compare("1.4", "1.4.0") == 0)
        #expect(AppVersion.compare("2.0.0", "1.99.99") == 1)
        #expect(AppVersion.less("1.0.0-beta", "1.0.0") == false)
    }
}
