import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The SMTP URL, the message's rendering and the DATA block, without a network.
@Suite("E-mail message")
struct EmailMessageTests {
    static func group(title: String) -> GroupBody {
        GroupBody(
            id: "42", signature: "s", kind: "container", groupingVersion: "v2", title: title, count: 3, devices: 2,
            firstSeen: Date(timeIntervalSince1970: 1_795_000_000), lastSeen: Date(timeIntervalSince1970: 1_795_003_600.25),
            status: .open, resolvedIn: nil, fatal: true, versions: (1...12).map { "2.\(13 - $0).0" })
    }

    static func message(title: String, event: String = "group.new", when: AlertRule.Trigger? = nil) -> EmailMessage {
        EmailMessage(
            deliveryID: UUID(uuidString: "0E1F2A3B-4C5D-4E6F-8A9B-0C1D2E3F4A5B")!, event: event,
            rule: AlertRuleRef(id: "7", name: "<i>ops</i>"), when: when, project: "demo",
            subject: .group(group(title: title), url: "https://crash.example.com/projects/demo/crashes/42"),
            from: "alerts@example.com", to: "ana@example.com", date: Date(timeIntervalSince1970: 1_795_003_700),
            host: "crash.example.com")
    }

    /// The header section of a rendered message, unfolded.
    static func headers(_ rendered: [UInt8]) -> [String: String] {
        let text = String(decoding: rendered, as: UTF8.self)
        let head = text.components(separatedBy: "\r\n\r\n")[0].replacingOccurrences(of: "\r\n ", with: " ")
        var out: [String: String] = [:]
        for line in head.components(separatedBy: "\r\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            out[String(parts[0])] = parts[1].trimmingCharacters(in: .whitespaces)
        }
        return out
    }

    /// RFC 2047 `B` words decoded and joined.
    static func decodeWords(_ value: String) -> String {
        var bytes: [UInt8] = []
        for word in value.split(separator: " ") {
            let inner = word.dropFirst("=?UTF-8?B?".count).dropLast(2)
            bytes += Data(base64Encoded: String(inner)) ?? Data()
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("headers: Message-ID and X-CrashGuard-Delivery carry the delivery id; no line of a value breaks out")
    func headers() throws {
        let rendered = Self.message(title: "index <n> beyond bounds\r\nBcc: eve@example.com").render()
        let text = String(decoding: rendered, as: UTF8.self)
        let headers = Self.headers(rendered)
        #expect(headers["Message-ID"] == "<0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b@crash.example.com>")
        #expect(headers["X-CrashGuard-Delivery"] == "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b")
        #expect(headers["X-CrashGuard-Event"] == "group.new" && headers["X-CrashGuard-Rule"] == "7")
        #expect(headers["Auto-Submitted"] == "auto-generated" && headers["Precedence"] == "bulk")
        #expect(headers["Date"] == "Wed, 18 Nov 2026 12:08:20 +0000")
        #expect(headers["Bcc"] == nil)
        #expect(headers["Subject"] == "[CrashGuard] New crash in demo: index <n> beyond boundsBcc: eve@example.com")
        #expect(!text.contains("\r\nBcc:"))
    }

    @Test("a non-ASCII subject is RFC 2047 words of at most 75 characters that decode to it; the title is cut at 120")
    func encodedSubject() {
        let title = String(repeating: "é💥 ", count: 50)
        let rendered = Self.message(title: title).render()
        let raw = String(decoding: rendered, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
        let subjectLines = raw.components(separatedBy: "\r\n").drop { !$0.hasPrefix("Subject:") }.prefix {
            $0.hasPrefix("Subject:") || $0.hasPrefix(" ")
        }
        #expect(subjectLines.count > 2)
        for line in subjectLines { #expect(line.utf8.count <= 76 + "Subject: ".count) }
        let decoded = Self.decodeWords(Self.headers(rendered)["Subject"]!)
        #expect(decoded == "[CrashGuard] New crash in demo: " + String(title.prefix(120)) + "…")
    }

    @Test("a frequency firing's subject says its count and window")
    func frequencySubject() {
        let message = Self.message(title: "t", event: "group.frequency", when: .frequency(count: 50, windowMinutes: 60))
        #expect(message.subjectLine == "[CrashGuard] Frequent crash (50 reports in 60 minutes) in demo: t")
    }

    @Test("both parts show the facts; the HTML part escapes every value and loads nothing from outside")
    func parts() {
        let title = #"<img src="https://evil.example/x.png"> & <script>alert(1)</script>"#
        let message = Self.message(title: title)
        #expect(message.text.contains(title) && message.text.contains("Rule: <i>ops</i>"))
        for fact in [
            "Reports (7 days): 3", "Devices (7 days): 2", "First seen: 2026-11-18T11:06:40Z", "Last seen: 2026-11-18T12:06:40Z",
            "Versions: 2.12.0, 2.11.0, 2.10.0, 2.9.0, 2.8.0, 2.7.0, 2.6.0, 2.5.0, 2.4.0, 2.3.0\r\n", "Kind: container",
            "Fatal: yes", "https://crash.example.com/projects/demo/crashes/42",
        ] {
            #expect(message.text.contains(fact), "\(fact)")
        }
        let html = message.html
        #expect(!html.contains("<img") && !html.contains("<script") && !html.contains("<i>"))
        #expect(html.contains("&lt;img src=&quot;https://evil.example/x.png&quot;&gt; &amp; &lt;script&gt;"))
        #expect(!html.contains("src=\"") && !html.contains("url(") && !html.contains("<link"))
        #expect(html.contains(#"<a href="https://crash.example.com/projects/demo/crashes/42">"#))
    }

    @Test("the body is multipart/alternative: a text and an HTML part in base64, lines of at most 78 bytes")
    func multipart() {
        let rendered = String(decoding: Self.message(title: "t").render(), as: UTF8.self)
        #expect(rendered.contains("Content-Type: multipart/alternative; boundary=\"crashguard-0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b\""))
        #expect(rendered.contains("Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64"))
        #expect(rendered.contains("Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64"))
        #expect(rendered.hasSuffix("--crashguard-0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b--\r\n"))
        let body = rendered.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n")
        #expect(body.components(separatedBy: "\r\n").allSatisfy { $0.utf8.count <= 78 })
    }

    @Test("DATA: lines end in CRLF, a leading dot is doubled, the block ends with a dot alone")
    func dataBlock() {
        let block = SMTPClient.dataBlock(Array(".one\r\ntwo\n..three\rfour".utf8))
        #expect(String(decoding: block, as: UTF8.self) == "..one\r\ntwo\r\n...three\r\nfour\r\n.\r\n")
        #expect(String(decoding: SMTPClient.dataBlock(Array("a\r\n".utf8)), as: UTF8.self) == "a\r\n.\r\n")
    }

    @Test("the SMTP URL: schemes, default ports, percent-decoded credentials, and what it refuses")
    func url() throws {
        let plain = try SMTPServer(url: "smtp://mail.example.com")
        #expect(plain.host == "mail.example.com" && plain.port == 587 && plain.security == .startTLS)
        #expect(plain.user == nil && plain.password == nil && !plain.allowsPlainCredentials)
        let implicit = try SMTPServer(url: "smtps://crash%20guard:p%40ss%3Aw%2Frd@[::1]:2465")
        #expect(implicit.host == "::1" && implicit.port == 2465 && implicit.security == .implicitTLS)
        #expect(implicit.user == "crash guard" && implicit.password == "p@ss:w/rd" && implicit.allowsPlainCredentials)
        #expect(implicit.isLoopback && implicit.hostIsAddress)
        #expect(try SMTPServer(url: "smtps://relay.example.com").port == 465)
        #expect(try !SMTPServer(url: "smtp://relay.example.com").isLoopback)
        for bad in ["http://mail.example.com", "smtp://", "smtp://:pw@mail.example.com", "smtp://mail.example.com/x", "mail"] {
            #expect(EmailSettings.urlProblem(bad) != nil, "\(bad)")
        }
        var settings = EmailSettings()
        settings.smtpURL = "smtp://mail.example.com"
        #expect(settings.problem != nil)
        settings.from = "alerts@example.com"
        #expect(settings.problem == nil)
        settings.caFile = "/nonexistent/ca.pem"
        #expect(settings.problem?.hasPrefix("CRASHGUARD_SMTP_CA_FILE") == true)
    }
}
