import CrashWire
import Foundation
import HTTPTypes
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The Sentry door's pure parts: envelope parsing, the event-to-report mapping of the
/// contract ("Ingest from Sentry SDKs"), key extraction and DSNs; no server, no database.
@Suite struct SentryMappingTests {
    let now = Date(timeIntervalSince1970: 1_795_000_000)

    func map(_ event: [String: Any]) throws -> Report {
        try SentryEvent.decode(Array(JSONSerialization.data(withJSONObject: event))).report(receivedAt: now)
    }

    func exceptionEvent(_ values: [[String: Any]], extra: [String: Any] = [:]) -> [String: Any] {
        var event: [String: Any] = ["event_id": "9ec79c33ec9942ab8353589fcb2e04dc", "exception": ["values": values]]
        for (key, value) in extra { event[key] = value }
        return event
    }

    // MARK: Envelopes

    @Test func envelopeItemsWithAndWithoutLength() throws {
        let text =
            "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\",\"dsn\":\"https://k@h/1\"}\n"
            + "{\"type\":\"attachment\",\"length\":10}\n0123\n56789\n"  // binary payload holding a newline
            + "{\"type\":\"event\"}\n{\"message\":\"hi\"}\n"
            + "{\"type\":\"session\",\"length\":2}\n{}"  // no newline at the end
        let envelope = try SentryEnvelope.parse(Array(text.utf8))
        #expect(envelope.header.eventID == "9ec79c33ec9942ab8353589fcb2e04dc")
        #expect(envelope.header.dsn == "https://k@h/1")
        #expect(envelope.items.map(\.type) == ["attachment", "event", "session"])
        #expect(envelope.items.map { String(decoding: $0.payload, as: UTF8.self) } == ["0123\n56789", "{\"message\":\"hi\"}", "{}"])
    }

    @Test func envelopeEdgeCases() throws {
        // An empty header, a trailing newline, an item with an empty payload at the end.
        let empty = try SentryEnvelope.parse(Array("{}\n".utf8))
        #expect(empty.items.isEmpty)
        #expect(empty.header.eventID == nil)
        let last = try SentryEnvelope.parse(Array("{}\n{\"type\":\"client_report\"}".utf8))
        #expect(last.items.map(\.type) == ["client_report"])
        #expect(last.items.first?.payload.isEmpty == true)
        let crlf = try SentryEnvelope.parse(Array("{}\r\n{\"type\":\"event\",\"length\":2}\r\n{}\r\n".utf8))
        #expect(crlf.items.map(\.type) == ["event"])
    }

    @Test(arguments: [
        "",
        "not json\n{\"type\":\"event\"}\n{}",
        "[1]\n",
        "{}\n{\"length\":2}\n{}",
        "{}\n{\"type\":\"event\",\"length\":50}\n{}",
        "{}\n{\"type\":\"event\",\"length\":-1}\n{}",
        "{}\nnot a header\n",
    ])
    func malformedEnvelopes(_ text: String) {
        #expect(throws: SentryEnvelope.Malformed.self) { try SentryEnvelope.parse(Array(text.utf8)) }
    }

    @Test func tooManyItems() {
        let text = "{}\n" + String(repeating: "{\"type\":\"session\",\"length\":0}\n", count: SentryEnvelope.maxItems + 1)
        #expect(throws: SentryEnvelope.Malformed.self) { try SentryEnvelope.parse(Array(text.utf8)) }
    }

    // MARK: Events to reports

    @Test func exceptionReasonStackAndFatal() throws {
        let report = try map(
            exceptionEvent([
                ["type": "KeyError", "value": "'a'"],
                [
                    "type": "ValueError", "value": "bad value",
                    "mechanism": ["type": "excepthook", "handled": false],
                    "stacktrace": [
                        "frames": [
                            ["function": "<module>", "module": "__main__", "filename": "app.py", "in_app": true],
                            ["function": "dispatch", "module": "framework.core", "in_app": false],
                            ["function": "handler", "filename": "views.py", "in_app": true],
                            ["package": "/var/containers/Bundle/Application/X/Demo.app/Demo", "in_app": true],
                        ]
                    ],
                ],
            ]))
        #expect(report.id == UUID(uuidString: "9ec79c33-ec99-42ab-8353-589fcb2e04dc"))
        #expect(report.kind == .exception)
        #expect(report.reason == "ValueError: bad value")
        // Innermost first, in-app frames only, module before filename before package.
        #expect(report.stack == ["? (Demo)", "handler (views.py)", "<module> (__main__)"])
        #expect(report.fatal == true)
    }

    @Test func allFramesWhenNoneIsInApp() throws {
        let report = try map(
            exceptionEvent([
                [
                    "type": "Error", "mechanism": ["handled": true],
                    "stacktrace": ["frames": [["function": "a", "module": "m"], ["function": "b", "in_app": false], [:]]],
                ]
            ]))
        #expect(report.reason == "Error")
        #expect(report.stack == ["? (?)", "b (?)", "a (m)"])
        #expect(report.fatal == false)
    }

    @Test func messageEvents() throws {
        #expect(try map(["logentry": ["formatted": "formatted text", "message": "raw %s"], "message": "m"]).reason == "formatted text")
        #expect(try map(["logentry": ["message": "raw %s"], "message": "m"]).reason == "raw %s")
        #expect(try map(["message": "plain message"]).reason == "plain message")
        #expect(try map(["message": ["formatted": "object message"]]).reason == "object message")
        let report = try map(["message": "plain message", "level": "info"])
        #expect(report.kind == .custom)
        #expect(report.stack == nil)
        #expect(report.fatal == false)
        #expect(try map(["level": "error"]).reason == SentryEvent.unlabeledReason)
    }

    @Test func releaseToApp() throws {
        func app(_ release: String?, identifier: String? = nil) throws -> AppInfo {
            var event: [String: Any] = ["message": "m"]
            if let release { event["release"] = release }
            if let identifier { event["contexts"] = ["app": ["app_identifier": identifier]] }
            return try map(event).app
        }
        #expect(try app("com.example.demo@1.4.2+77") == AppInfo(id: "com.example.demo", version: "1.4.2", build: "77"))
        #expect(try app("backend@2.0.0") == AppInfo(id: "backend", version: "2.0.0"))
        #expect(try app("1.2.3") == AppInfo(id: "unknown", version: "1.2.3"))
        #expect(try app("a@b@1.0") == AppInfo(id: "a", version: "b@1.0"))
        #expect(try app("pkg@1.0", identifier: "io.sentry.app") == AppInfo(id: "io.sentry.app", version: "1.0"))
        #expect(try app(nil, identifier: "io.sentry.app") == AppInfo(id: "io.sentry.app", version: "unknown"))
        #expect(try app(nil) == AppInfo(id: "unknown", version: "unknown"))
        #expect(try app("") == AppInfo(id: "unknown", version: "unknown"))
    }

    @Test func deviceFromContextsAndUser() throws {
        let contexts: [String: Any] = [
            "os": ["name": "iOS", "version": "17.1"], "device": ["model": "iPhone14,2", "id": "ctx-device"],
        ]
        let withUser = try map(["message": "m", "contexts": contexts, "user": ["id": "user-42", "email": "x@y"]])
        #expect(withUser.device == DeviceInfo(os: "iOS", osVersion: "17.1", model: "iPhone14,2", id: "user-42"))
        let numericUser = try map(["message": "m", "user": ["id": 42]])
        #expect(numericUser.device?.id == "42")
        let noUser = try map(["message": "m", "contexts": contexts])
        #expect(noUser.device?.id == "ctx-device")
        #expect(try map(["message": "m"]).device == nil)
    }

    @Test func fingerprintTagsAndEnvironment() throws {
        let report = try map([
            "message": "m", "fingerprint": ["checkout", "payment"], "environment": "production",
            "tags": ["region": "eu", "count": 3, "flag": true],
        ])
        #expect(report.fingerprint == ["checkout", "payment"])
        #expect(report.context == ["environment": "production", "region": "eu"])
        #expect(try map(["message": "m", "fingerprint": ["{{ default }}"]]).fingerprint == nil)
        #expect(try map(["message": "m", "fingerprint": ["{{ default }}", "extra"]]).fingerprint == ["{{ default }}", "extra"])
        let pairs = try map(["message": "m", "tags": [["a", "1"], ["b", "2"], ["bad"]]])
        #expect(pairs.context == ["a": "1", "b": "2"])
        #expect(try map(["message": "m"]).context == nil)
    }

    @Test func contextKeepsAtMost64Entries() throws {
        var tags: [String: String] = [:]
        for i in 0..<100 { tags[String(format: "tag%03d", i)] = "v" }
        let report = try map(["message": "m", "tags": tags, "environment": "prod"])
        #expect(report.context?.count == ReportLimits.maxContextEntries)
        #expect(report.context?["environment"] == "prod")
        #expect(report.context?["tag000"] == "v")
        #expect(report.context?["tag063"] == nil)
        #expect(report.validationError(now: now) == nil)
    }

    @Test func timestamps() throws {
        let inside = now.addingTimeInterval(-3600)
        #expect(try map(["message": "m", "timestamp": RFC3339.format(inside)]).timestamp == inside)
        #expect(try map(["message": "m", "timestamp": inside.timeIntervalSince1970]).timestamp == inside)
        #expect(try map(["message": "m", "timestamp": 1_794_996_400.5]).timestamp == Date(timeIntervalSince1970: 1_794_996_400.5))
        // A zone-less time is UTC, as Sentry reads it.
        let naive = String(RFC3339.format(inside).dropLast())
        #expect(try map(["message": "m", "timestamp": naive]).timestamp == inside)
        // Outside [now - 30 days, now + 1 day], missing or unreadable: the time it was received.
        #expect(try map(["message": "m", "timestamp": "2017-05-17T16:33:05Z"]).timestamp == now)
        #expect(try map(["message": "m", "timestamp": now.timeIntervalSince1970 + 2 * 86_400]).timestamp == now)
        #expect(try map(["message": "m"]).timestamp == now)
        #expect(try map(["message": "m", "timestamp": "yesterday"]).timestamp == now)
    }

    @Test func overlongValuesAreCutAtCharacterBoundaries() throws {
        let long = String(repeating: "é", count: 5000)  // 10000 bytes
        let frames = (0..<300).map { i in ["function": "f\(i)" + String(repeating: "x", count: 2000), "module": "m"] }
        let report = try map(
            exceptionEvent(
                [["type": "E", "value": long, "stacktrace": ["frames": frames]]],
                extra: [
                    "release": String(repeating: "a", count: 200) + "@" + String(repeating: "ü", count: 100),
                    "fingerprint": (0..<10).map { "part\($0)" + String(repeating: "z", count: 300) },
                    "tags": [String(repeating: "k", count: 100): String(repeating: "v", count: 2000)],
                    "user": ["id": String(repeating: "u", count: 200)],
                ]))
        #expect(report.validationError(now: now) == nil)
        #expect(report.reason.utf8.count == 8191)  // 8192 would split an "é"
        #expect(report.reason.hasPrefix("E: éé"))
        #expect(report.stack?.count == 256)
        #expect(report.stack?.first?.hasPrefix("f299") == true)  // the innermost frames are kept
        #expect(report.stack?.allSatisfy { $0.utf8.count <= 1024 } == true)
        #expect(report.app.id.utf8.count == 128)
        #expect(report.app.version.utf8.count == 128)
        #expect(report.fingerprint?.count == 8)
        #expect(report.device?.id?.utf8.count == 128)
        #expect(report.context?.keys.first?.utf8.count == 64)
    }

    @Test func nulCharactersDoNotLoseTheEvent() throws {
        let report = try map(["message": "a\u{0}b", "tags": ["k": "v\u{0}"]])
        #expect(report.reason == "a\u{FFFD}b")
        #expect(report.validationError(now: now) == nil)
    }

    @Test func eventIDs() throws {
        #expect(
            try map(["event_id": "9EC79C33EC9942AB8353589FCB2E04DC", "message": "m"]).id
                == UUID(uuidString: "9ec79c33-ec99-42ab-8353-589fcb2e04dc"))
        #expect(
            try map(["event_id": "9ec79c33-ec99-42ab-8353-589fcb2e04dc", "message": "m"]).id
                == UUID(uuidString: "9ec79c33-ec99-42ab-8353-589fcb2e04dc"))
        let fallback = UUID()
        let event = try SentryEvent.decode(Array("{\"message\":\"m\"}".utf8))
        #expect(event.report(receivedAt: now, id: fallback).id == fallback)
        #expect(throws: SentryEnvelope.Malformed.self) { try SentryEvent.decode(Array("{\"event_id\":\"xyz\"}".utf8)) }
        #expect(throws: SentryEnvelope.Malformed.self) { try SentryEvent.decode(Array("{\"event_id\":12}".utf8)) }
        // Foundation's parser read a sign in place of a digit (`-3` as 0xFD); both doors refuse it.
        #expect(throws: SentryEnvelope.Malformed.self) {
            try SentryEvent.decode(Array("{\"event_id\":\"9ec79c33-ec99-42ab-8353-589fcb2e-30c\"}".utf8))
        }
    }

    @Test(arguments: ["", "[]", "\"text\"", "{", "{\"message\":}", "null"])
    func malformedEvents(_ text: String) {
        #expect(throws: SentryEnvelope.Malformed.self) { try SentryEvent.decode(Array(text.utf8)) }
    }

    @Test func fieldsOfAnotherTypeAreIgnored() throws {
        let report = try map([
            "message": "m", "release": 12, "user": "nobody", "contexts": ["os": "linux", "device": ["model": 5]],
            "exception": ["values": "nope"], "tags": "t", "fingerprint": "f", "timestamp": [1],
        ])
        #expect(report.reason == "m")
        #expect(report.app == AppInfo(id: "unknown", version: "12"))
        #expect(report.device == nil)
        #expect(report.fingerprint == nil)
        #expect(report.context == nil)
        #expect(report.timestamp == now)
    }

    /// A recorded event of the Sentry Cocoa SDK (Tests/Fixtures/sentry/README.md): a mach
    /// exception with system and in-app frames given by `package` only.
    @Test func recordedCocoaEvent() throws {
        let url = TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/sentry/cocoa-converted-event.json")
        let report = try SentryEvent.decode(Array(try Data(contentsOf: url))).report(receivedAt: now)
        #expect(report.id == UUID(uuidString: "f31ce2b6-9e8e-470c-858e-ed4753fda78c"))
        #expect(report.kind == .exception)
        expectRecordedCocoaReport(report)
        #expect(report.app == AppInfo(id: "unknown", version: "unknown"))
        #expect(report.timestamp == now)  // 2017: outside the window
        #expect(report.validationError(now: now) == nil)
    }

    // MARK: Keys and DSNs

    @Test func keysFromHeaders() {
        func key(_ fields: [(HTTPField.Name, String)], query: String? = nil) -> String? {
            var headers = HTTPFields()
            for (name, value) in fields { headers.append(HTTPField(name: name, value: value)) }
            return SentryAuth.key(headers: headers, query: query)
        }
        let auth = SentryAuth.authHeader
        #expect(key([(auth, "Sentry sentry_version=7, sentry_client=sentry.python/2.0, sentry_key=abc")]) == "abc")
        #expect(key([(auth, "Sentry sentry_key=abc,sentry_version=7")]) == "abc")
        #expect(key([(auth, "sentry_key=abc, sentry_version=7")]) == "abc")
        #expect(key([(.authorization, "Sentry sentry_key=def")]) == "def")
        #expect(key([(.authorization, "Bearer token")]) == nil)
        #expect(key([(auth, "Sentry sentry_version=7")], query: "q") == "q")
        #expect(key([(auth, "Sentry sentry_key=")]) == nil)
        #expect(key([], query: "") == nil)
        #expect(key([(auth, "Sentry sentry_key=abc")], query: "q") == "abc")
        #expect(SentryDSN.publicKey(ofDSN: "https://pub@o1.ingest.example.com/42") == "pub")
        #expect(SentryDSN.publicKey(ofDSN: "https://pub:secret@example.com/42") == "pub")
        #expect(SentryDSN.publicKey(ofDSN: "https://example.com/42") == nil)
    }

    @Test func dsns() {
        #expect(SentryDSN.format(publicURL: "http://127.0.0.1:8080", key: "cgi_k", sentryID: 7) == "http://cgi_k@127.0.0.1:8080/7")
        #expect(SentryDSN.format(publicURL: "https://crash.example.com/", key: "k", sentryID: 12) == "https://k@crash.example.com/12")
        #expect(SentryDSN.format(publicURL: "https://example.com:8443/crash", key: "k", sentryID: 3) == "https://k@example.com:8443/crash/3")
        #expect(SentryDSN.format(publicURL: "http://[::1]:8080", key: "k", sentryID: 1) == "http://k@[::1]:8080/1")
        #expect(SentryDSN.isValidPublicURL("http://127.0.0.1:8080"))
        #expect(SentryDSN.isValidPublicURL("https://crash.example.com/base"))
        #expect(!SentryDSN.isValidPublicURL("ftp://example.com"))
        #expect(!SentryDSN.isValidPublicURL("example.com"))
        #expect(!SentryDSN.isValidPublicURL("http://user@example.com"))
    }
}
