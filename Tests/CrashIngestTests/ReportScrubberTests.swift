import CrashWire
import Foundation
import Testing

@testable import CrashIngest

/// The scrubbing rules of data-protection.md, example by example, and near misses that must stay as sent.
@Suite struct ReportScrubberTests {
    static let defaults = ReportScrubber()
    static let everything = ReportScrubber(settings: ScrubSettings(scrubIPs: true, scrubEmails: true))

    /// (text, scrubbed with the defaults)
    static let textCases: [(String, String)] = [
        // PEM private keys, with and without an END line.
        (
            "key -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- done",
            "key [Filtered] done"
        ),
        ("-----begin private key-----\nabc", "[Filtered]"),
        ("-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----"),
        // Authorization headers: the name stays, the rest of the line goes.
        ("Authorization: Basic dXNlcjpwYXNz\nnext", "Authorization: [Filtered]\nnext"),
        ("Proxy-Authorization: Digest x=1", "Proxy-Authorization: [Filtered]"),
        ("authorization:abc", "authorization: [Filtered]"),
        // Bearer tokens.
        ("request failed: Bearer eyJhbGciOi.J9x-_~+/= rejected", "request failed: Bearer [Filtered] rejected"),
        ("bearer abc", "bearer [Filtered]"),
        // key=value pairs and JSON keys.
        ("GET /x?token=abc&page=2", "GET /x?token=[Filtered]&page=2"),
        ("{\"client_secret\": \"x1\"}", "{\"client_secret\": \"[Filtered]\"}"),
        ("db_password = hunter2; retry", "db_password = [Filtered]; retry"),
        ("API-KEY='k1' ok", "API-KEY='[Filtered]' ok"),
        ("sessionId=42)", "sessionId=[Filtered])"),
        ("{\"auth\":\"a\",\"page\":2}", "{\"auth\":\"[Filtered]\",\"page\":2}"),
        // URL credentials.
        ("postgres://app:s3cr3t@db.internal:5432/x", "postgres://app:[Filtered]@db.internal:5432/x"),
        ("redis://:pw@cache", "redis://:[Filtered]@cache"),
        // Payment cards (Luhn-valid, standing alone).
        ("card 4111 1111 1111 1111 declined", "card [Filtered] declined"),
        ("card 4111-1111-1111-1111.", "card [Filtered]."),
        ("4111111111111111", "[Filtered]"),
        ("pan=5500005555555559", "pan=[Filtered]"),
        ("(378282246310005)", "([Filtered])"),
        // The rules in order: the header takes the bearer token with it.
        ("Authorization: Bearer abc", "Authorization: [Filtered]"),
    ]

    /// Texts no default rule may touch.
    static let nearMisses: [String] = [
        "123e4567-e89b-12d3-4567-426614174000",
        "v2.4.1",
        "1.2.3.4",
        "4111 1111 1111 1112",  // Luhn fails
        "order 1234567890123456 shipped",  // Luhn fails
        "4111111111111111x",  // not alone
        "id-4111111111111111",  // joined by a dash
        "4111111111111111-7",
        "-[AuthClient validateToken:withCompletion:]",
        "\\Session.token",
        "token: abc",
        "tokenizer crashed",
        "Bearer ",
        "token=",
        "token=[Filtered]",
        "Authorization: [Filtered]",
        "postgres://app:[Filtered]@db",
        "https://example.com/a?b=c",
        "http://user@host/x",
        "-----BEGIN PRIVATE KEY",
        "author wrote 12 lines",
        "1234567890123",
        "",
        "Fatal error: Unexpectedly found nil while unwrapping an Optional value",
    ]

    @Test(arguments: textCases.indices)
    func defaultTextRules(_ index: Int) {
        let (text, expected) = Self.textCases[index]
        #expect(Self.defaults.scrub(text: text) == expected)
        // Markers are never matched again: scrubbing twice changes nothing more.
        #expect(Self.defaults.scrub(text: expected) == expected)
    }

    @Test(arguments: nearMisses)
    func nearMissesStay(_ text: String) {
        #expect(Self.defaults.scrub(text: text) == text)
    }

    @Test func keyRule() {
        for key in ["api_key", "X-Api-Key", "Authorization", "sessionId", "CSRF-Token", "db_password", "author", "Cookie", "PRIVATE_KEY"] {
            #expect(Self.defaults.scrub(contextValue: "v", key: key) == "[Filtered]", "\(key)")
        }
        for key in ["user", "screen", "retries", "keyPath"] {
            #expect(Self.defaults.scrub(contextValue: "v", key: key) == "v", "\(key)")
        }
        let safe = ReportScrubber(settings: ScrubSettings(safeFields: ["Author"]))
        #expect(safe.scrub(contextValue: "Ann token=x", key: "author") == "Ann token=x")
        #expect(safe.scrub(contextValue: "token=x", key: "note") == "token=[Filtered]")
    }

    @Test func sensitiveFieldsAddKeyWords() {
        let scrubber = ReportScrubber(settings: ScrubSettings(sensitiveFields: ["Customer_Name"]))
        #expect(scrubber.scrub(contextValue: "Ann", key: "customer-name") == "[Filtered]")
        #expect(scrubber.scrub(text: "customerName=Ann ok") == "customerName=[Filtered] ok")
        // Without the defaults only the extra key words count, and the text rules are off.
        let only = ReportScrubber(settings: ScrubSettings(scrubDefaults: false, sensitiveFields: ["pin"]))
        #expect(only.scrub(contextValue: "1234", key: "PIN") == "[Filtered]")
        #expect(only.scrub(contextValue: "x", key: "password") == "x")
        #expect(only.scrub(text: "token=abc 4111111111111111") == "token=abc 4111111111111111")
    }

    @Test func optionalRules() {
        let cases: [(String, String)] = [
            ("from 10.0.0.1 at 12:30", "from [ip] at 12:30"),
            ("peer 192.168.1.20:443", "peer [ip]:443"),
            ("addr 2001:db8::1 ok", "addr [ip] ok"),
            ("::1", "[ip]"),
            ("fe80::1:2:3.4.5.6", "[ip]"),
            ("2001:0db8:0000:0000:0000:ff00:0042:8329", "[ip]"),
            ("mail ann.lee+x@example.co.uk now", "mail [email] now"),
            ("v1.2.3.4", "v1.2.3.4"),
            ("1.2.3.4.5", "1.2.3.4.5"),
            ("256.1.1.1", "256.1.1.1"),
            ("00:1a:2b:3c:4d:5e", "00:1a:2b:3c:4d:5e"),
            ("Foo::bar", "Foo::bar"),
            ("@objc", "@objc"),
            ("a@b", "a@b"),
            // A fuzz finding: the address must not make `79::` an IPv6 address on a second pass.
            ("x 79::ati@b.co", "x 79::[email]"),
            // An address ended a digit run too long for a card: what is left is one.
            ("10.0.0.1 4111111111111111", "[ip] [Filtered]"),
        ]
        for (text, expected) in cases {
            #expect(Self.everything.scrub(text: text) == expected, "\(text)")
            #expect(Self.everything.scrub(text: expected) == expected, "\(text)")
        }
        // Off by default: an address is kept.
        #expect(Self.defaults.scrub(text: "from 10.0.0.1 ann@example.com") == "from 10.0.0.1 ann@example.com")
    }

    @Test func reportFields() throws {
        var report = Report(
            kind: .exception, reason: "login failed: Bearer abc123", stack: ["f(token=x)", "main"],
            app: AppInfo(id: "com.example", version: "1.2.3.4"), fingerprint: ["card 4111 1111 1111 1111"],
            context: ["password": "hunter2", "screen": "login", "url": "https://u:p@h/"])
        report.environment = "token=abc"
        #expect(Self.defaults.scrub(&report))
        #expect(report.reason == "login failed: Bearer [Filtered]")
        #expect(report.stack == ["f(token=[Filtered])", "main"])
        #expect(report.fingerprint == ["card [Filtered]"])
        #expect(report.context == ["password": "[Filtered]", "screen": "login", "url": "https://u:[Filtered]@h/"])
        #expect(report.app.version == "1.2.3.4")
        #expect(report.environment == "token=abc")
        // Once scrubbed, nothing changes any more.
        #expect(!Self.defaults.scrub(&report))
        var clean = Report(kind: .exception, reason: "index out of range", app: AppInfo(id: "a", version: "1"))
        #expect(!Self.defaults.scrub(&clean))
    }

    @Test func luhn() {
        #expect(ReportScrubber.luhn([4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]))
        #expect(!ReportScrubber.luhn([4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]))
    }

    /// Adversarial texts finish: the rules scan forward and never back up by more than a word.
    @Test func longHostileTextsFinish() {
        let hostile = [
            String(repeating: "-----BEGIN ", count: 20_000),
            String(repeating: "a", count: 200_000) + "=",
            String(repeating: "token", count: 40_000),
            String(repeating: "1 ", count: 100_000),
            String(repeating: "a@", count: 100_000),
            String(repeating: "1:", count: 100_000),
            String(repeating: "x://", count: 50_000),
        ]
        for text in hostile {
            let once = Self.everything.scrub(text: text)
            #expect(Self.everything.scrub(text: once) == once)
        }
    }
}
