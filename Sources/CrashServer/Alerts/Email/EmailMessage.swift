import CrashWire
import Foundation

/// The message an e-mail delivery sends (contract "Alert rules and email", The message): the
/// headers, then a `multipart/alternative` body with a `text/plain` and a `text/html` part.
///
/// Everything shown comes from crash reports (titles, versions) or people (rule names), so it
/// is data: header values are reduced to printable characters and RFC 2047-encoded when not
/// ASCII, the HTML part escapes every value and loads nothing from outside (no images, no
/// remote styles), and both parts are base64 so no line of theirs is long or starts with `.`.
struct EmailMessage: Sendable {
    /// What the message is about: a crash group, or a release's crash-free sessions.
    enum Subject: Sendable {
        case group(GroupBody, url: String)
        case release(WebhookPayload.ReleaseBody, below: Double?)
    }

    var deliveryID: UUID
    var event: String
    var rule: AlertRuleRef?
    /// The rule's trigger when it still exists (the subject of `group.frequency` says its count
    /// and window).
    var when: AlertRule.Trigger?
    var project: String
    var subject: Subject
    var from: String
    var to: String
    var date: Date
    /// The host of the server's public URL: the right side of `Message-ID`.
    var host: String

    /// Titles are cut at this many characters in the subject.
    static let subjectTitleCharacters = 120

    /// The whole message, lines ending in CRLF.
    func render() -> [UInt8] {
        let boundary = "crashguard-" + deliveryID.uuidString.lowercased()
        var headers: [(String, String)] = [
            ("From", from), ("To", to), ("Date", Self.date(date)),
            ("Message-ID", "<\(deliveryID.uuidString.lowercased())@\(host)>"),
            ("Subject", Self.encodedWords(subjectLine)), ("MIME-Version", "1.0"),
            ("X-CrashGuard-Delivery", deliveryID.uuidString.lowercased()), ("X-CrashGuard-Event", Self.printable(event)),
        ]
        if let rule { headers.append(("X-CrashGuard-Rule", Self.printable(rule.id))) }
        headers += [
            ("Auto-Submitted", "auto-generated"), ("Precedence", "bulk"),
            ("Content-Type", "multipart/alternative; boundary=\"\(boundary)\""),
        ]
        var out = headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
        for (type, content) in [("text/plain", text), ("text/html", html)] {
            out += "--\(boundary)\r\nContent-Type: \(type); charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            out += Data(content.utf8).base64EncodedString(options: [.lineLength76Characters, .endLineWithCarriageReturn, .endLineWithLineFeed])
            out += "\r\n"
        }
        out += "--\(boundary)--\r\n"
        return Array(out.utf8)
    }

    /// `[CrashGuard] <event words> in <project>: <title>`; for a release, the version in place
    /// of the title.
    var subjectLine: String {
        switch subject {
        case .group(let group, _):
            var words = AlertEventWords.words(event)
            if event == "group.frequency", case .frequency(let count, let window) = when {
                words += " (\(count) \(count == 1 ? "report" : "reports") in \(window) minutes)"
            }
            var title = group.title.isEmpty ? "(no title)" : group.title
            if title.count > Self.subjectTitleCharacters { title = String(title.prefix(Self.subjectTitleCharacters)) + "…" }
            return "[CrashGuard] \(words) in \(project): \(title)"
        case .release(let release, let below):
            let threshold = below.map { " below \(WebhookPayload.percent($0))" } ?? ""
            return "[CrashGuard] Crash-free sessions\(threshold) in \(project): \(release.version)"
        }
    }

    /// The facts both parts show, in order: label and value (nil value: a heading line).
    private var facts: [(String, String)] {
        var out: [(String, String)] = [("Project", project), ("Event", "\(AlertEventWords.words(event)) (\(event))")]
        if let rule { out.append(("Rule", rule.name)) }
        switch subject {
        case .group(let group, _):
            out += [
                ("Reports (7 days)", String(group.count)), ("Devices (7 days)", String(group.devices)),
                ("First seen", Self.time(group.firstSeen)), ("Last seen", Self.time(group.lastSeen)),
                ("Versions", group.versions.prefix(10).joined(separator: ", ")), ("Kind", group.kind),
                ("Fatal", group.fatal ? "yes" : "no"), ("Status", group.status.rawValue),
            ]
        case .release(let release, let below):
            out += [
                ("Version", release.version), ("Crash-free sessions", WebhookPayload.percent(release.crashFreeSessions)),
            ]
            if let below { out.append(("Threshold", WebhookPayload.percent(below))) }
            out += [
                ("Sessions", "\(release.sessions) in \(release.windowMinutes) minutes"),
                ("Crashed sessions", String(release.crashedSessions)),
            ]
        }
        return out
    }

    private var heading: String {
        switch subject {
        case .group(let group, _): group.title.isEmpty ? "(no title)" : group.title
        case .release(let release, _): "Version \(release.version)"
        }
    }

    private var link: (label: String, url: String) {
        switch subject {
        case .group(_, let url): ("Open the crash", url)
        case .release(let release, _): ("Open the release", release.url)
        }
    }

    /// The `text/plain` part.
    var text: String {
        var lines = ["\(AlertEventWords.words(event)) in \(project)", "", heading, ""]
        lines += facts.map { "\($0.0): \($0.1)" }
        lines += ["", "\(link.label): \(link.url)", "", "Sent by CrashGuard because of an alert rule of this project."]
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// The `text/html` part: inline styles only, every value escaped.
    var html: String {
        let e = HTMLEscaping.escape
        var rows = ""
        for (label, value) in facts {
            rows += "<tr><th style=\"text-align:left;padding:2px 12px 2px 0;font-weight:600\">\(e(label))</th>"
            rows += "<td style=\"padding:2px 0\">\(e(value))</td></tr>\r\n"
        }
        return """
            <!DOCTYPE html>\r
            <html><head><meta charset="utf-8"><title>\(e(subjectLine))</title></head>\r
            <body style="font-family:sans-serif;color:#222">\r
            <p style="color:#666;margin:0">\(e(AlertEventWords.words(event))) in \(e(project))</p>\r
            <h1 style="font-size:18px;font-family:monospace;word-break:break-all">\(e(heading))</h1>\r
            <table style="border-collapse:collapse">\r
            \(rows)</table>\r
            <p><a href="\(e(link.url))">\(e(link.label))</a></p>\r
            <p style="color:#666;font-size:12px">Sent by CrashGuard because of an alert rule of this project.</p>\r
            </body></html>\r

            """
    }

    // MARK: - Header values

    /// `text` without control characters (a header value stays one line).
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }))
    }

    /// `text` as a header value: as it is when printable ASCII, else RFC 2047 encoded words
    /// (`=?UTF-8?B?...?=`, each at most 75 characters, never splitting a character) on folded
    /// lines.
    static func encodedWords(_ text: String) -> String {
        let text = printable(text)
        if text.unicodeScalars.allSatisfy({ $0.isASCII }) { return text }
        var words: [String] = []
        var chunk: [UInt8] = []
        // 75 - "=?UTF-8?B?".count - "?=".count = 63 base64 characters: 45 bytes (a multiple of 3).
        for character in text {
            let bytes = Array(String(character).utf8)
            if chunk.count + bytes.count > 45, !chunk.isEmpty {
                words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=")
                chunk = []
            }
            chunk += bytes.prefix(45)
        }
        if !chunk.isEmpty { words.append("=?UTF-8?B?\(Data(chunk).base64EncodedString())?=") }
        return words.joined(separator: "\r\n ")
    }

    /// RFC 3339 in UTC to the second: `2026-11-21T10:00:00Z`.
    static func time(_ date: Date) -> String {
        RFC3339.format(Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)))
    }

    /// RFC 5322's date: `Sat, 28 Nov 2026 17:30:26 +0000`.
    static func date(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        return formatter.string(from: date)
    }
}
