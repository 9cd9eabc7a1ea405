import CrashWire

/// What a project asks the scrubber to do (the contract's project settings, less `patterns`,
/// which are ``ScrubPatterns``).
public struct ScrubSettings: Sendable, Hashable {
    /// The default key words and the default text rules.
    public var scrubDefaults: Bool
    /// IPv4 and IPv6 addresses in text become `[ip]`.
    public var scrubIPs: Bool
    /// E-mail addresses in text become `[email]`.
    public var scrubEmails: Bool
    /// Extra key words, added to the defaults (used even when `scrubDefaults` is off).
    public var sensitiveFields: [String]
    /// Context keys whose values are never touched (whole key, case-insensitive).
    public var safeFields: [String]

    public init(
        scrubDefaults: Bool = true, scrubIPs: Bool = false, scrubEmails: Bool = false, sensitiveFields: [String] = [],
        safeFields: [String] = []
    ) {
        self.scrubDefaults = scrubDefaults
        self.scrubIPs = scrubIPs
        self.scrubEmails = scrubEmails
        self.sensitiveFields = sensitiveFields
        self.safeFields = safeFields
    }
}

/// Removes secrets from a report before it is grouped or stored (data-protection.md, "Scrubbing").
///
/// Applies to `reason`, every stack frame, every fingerprint part and every context value, and
/// nothing else. Every rule is a hand-written forward scan over the UTF-8 bytes: the work per
/// byte is bounded by the number and length of the key words, whatever the text.
///
/// Markers (`[Filtered]`, `[ip]`, `[email]`), inserted or sent literally, are never matched
/// again, so scrubbing is idempotent and a literal `token=[Filtered]` stays as sent.
public struct ReportScrubber: Sendable {
    public static let filtered = "[Filtered]"
    public static let ipMarker = "[ip]"
    public static let emailMarker = "[email]"
    /// The key words of the key rule and the key=value rule when `scrubDefaults` is on.
    public static let defaultKeyWords = [
        "password", "passwd", "secret", "token", "apikey", "auth", "credentials", "session", "cookie", "csrf", "privatekey",
    ]

    public let settings: ScrubSettings
    /// The project's `patterns`, compiled; nil when it has none.
    public let patterns: ScrubPatterns?
    /// Normalized key words: lower-cased, without `-` and `_`.
    let keyWords: [[UInt8]]
    let safeKeys: Set<String>

    public init(settings: ScrubSettings = ScrubSettings(), patterns: ScrubPatterns? = nil) {
        self.settings = settings
        self.patterns = patterns.flatMap { $0.isEmpty ? nil : $0 }
        var words = settings.scrubDefaults ? Self.defaultKeyWords : []
        words += settings.sensitiveFields
        keyWords = words.map { Self.normalizedKey(Array($0.utf8)) }.filter { !$0.isEmpty }
        safeKeys = Set(settings.safeFields.map { $0.lowercased() })
    }

    /// Whether any text rule runs.
    private var hasTextRules: Bool { settings.scrubDefaults || settings.scrubIPs || settings.scrubEmails || patterns != nil }

    /// Scrubs the report in place; `true` when any field changed (the contract's `"scrubbed"`).
    public func scrub(_ report: inout Report) -> Bool {
        var changed = false
        func apply(_ text: inout String) {
            let scrubbed = scrub(text: text)
            if scrubbed != text {
                text = scrubbed
                changed = true
            }
        }
        apply(&report.reason)
        if var stack = report.stack {
            for i in stack.indices { apply(&stack[i]) }
            report.stack = stack
        }
        if var fingerprint = report.fingerprint {
            for i in fingerprint.indices { apply(&fingerprint[i]) }
            report.fingerprint = fingerprint
        }
        if let context = report.context {
            var scrubbedContext = context
            for (key, value) in context {
                let scrubbed = scrub(contextValue: value, key: key)
                if scrubbed != value {
                    scrubbedContext[key] = scrubbed
                    changed = true
                }
            }
            report.context = scrubbedContext
        }
        return changed
    }

    /// One context value: safe keys as sent, sensitive keys `[Filtered]`, the rest through the text rules.
    public func scrub(contextValue value: String, key: String) -> String {
        if safeKeys.contains(key.lowercased()) { return value }
        if isSensitive(key: key) { return Self.filtered }
        return scrub(text: value)
    }

    /// Whether a context key, lower-cased and without `-` and `_`, contains a key word.
    public func isSensitive(key: String) -> Bool {
        containsKeyWord(Self.normalizedKey(Array(key.utf8)))
    }

    /// The text rules in the contract's order: the defaults, then the patterns, then IPs, then e-mails.
    public func scrub(text: String) -> String {
        guard hasTextRules, !text.isEmpty else { return text }
        return scrubbed(Array(text.utf8)).map { String(decoding: $0, as: UTF8.self) } ?? text
    }

    /// The text rules over UTF-8 text where it lies (a stack frame in the request body): the
    /// scrubbed text, or nil when no rule changed it.
    public func scrub(bytes: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard hasTextRules, !bytes.isEmpty else { return nil }
        return scrubbed(Array(bytes))
    }

    /// The rules run again over their own output until it holds still (at most four passes): a
    /// marker can join what was apart (an address replaced next to a URL's `@` makes other
    /// credentials), and text scrubbed once must scrub to itself (FuzzScrubber checks it). Text
    /// no rule changes costs one pass.
    private func scrubbed(_ bytes: [UInt8]) -> [UInt8]? {
        var current = bytes
        var changed = false
        for _ in 0..<4 {
            guard let next = scrubbedOnce(current) else { break }
            current = next
            changed = true
        }
        return changed ? current : nil
    }

    private func scrubbedOnce(_ bytes: [UInt8]) -> [UInt8]? {
        var scan = ScrubText(bytes)
        if settings.scrubDefaults {
            scan.apply(Self.privateKeys)
            scan.apply(Self.authorizationHeaders)
            scan.apply(Self.bearerTokens)
            scan.apply { keyValuePairs($0, $1) }
            scan.apply(Self.urlCredentials)
            scan.apply(Self.paymentCards)
        }
        if let patterns {
            for index in patterns.sources.indices { scan.apply { patterns.replacements(index, $0, $1) } }
        }
        if settings.scrubIPs { scan.apply(Self.ipAddresses) }
        if settings.scrubEmails { scan.apply(Self.emailAddresses) }
        // An address replaced by its marker can split a digit run that was too long to be a
        // card into one that is: the next pass (``scrubbed(_:)``) finds it, as it finds every
        // other rule's match that a marker makes.
        return scan.changed ? scan.bytes : nil
    }

    // MARK: - Key words

    static func normalizedKey(_ key: [UInt8]) -> [UInt8] {
        key.compactMap { b in
            b == 0x2D || b == 0x5F ? nil : lower(b)
        }
    }

    func containsKeyWord(_ normalized: [UInt8]) -> Bool {
        for word in keyWords where word.count <= normalized.count {
            var start = 0
            while start + word.count <= normalized.count {
                var i = 0
                while i < word.count && normalized[start + i] == word[i] { i += 1 }
                if i == word.count { return true }
                start += 1
            }
        }
        return false
    }

    // MARK: - Default rules

    /// `-----BEGIN [A-Z ]*PRIVATE KEY-----` through the next END line (or the end of the text).
    static func privateKeys(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 0
        while i < b.count {
            guard let afterBegin = keyArmor(b, i, word: "-----begin ") else {
                i += 1
                continue
            }
            var j = afterBegin
            var end = b.count
            while j < b.count {
                if let afterEnd = keyArmor(b, j, word: "-----end ") {
                    end = afterEnd
                    break
                }
                j += 1
            }
            out.append(Replacement(range: i..<end, text: filteredBytes))
            i = end
        }
        return out
    }

    /// The end of `<word>[A-Z ]*PRIVATE KEY-----` at `i`, or nil.
    private static func keyArmor(_ b: [UInt8], _ i: Int, word: StaticString) -> Int? {
        guard matches(b, i, word) else { return nil }
        var j = i + word.utf8CodeUnitCount
        while j < b.count && (isLetter(b[j]) || b[j] == 0x20) { j += 1 }
        let suffix: StaticString = "private key"
        let count = suffix.utf8CodeUnitCount
        guard j - (i + word.utf8CodeUnitCount) >= count, matches(b, j - count, suffix), matches(b, j, "-----")
        else { return nil }
        return j + 5
    }

    /// `Authorization:` (or `Proxy-Authorization:`): the rest of the line becomes ` [Filtered]`.
    static func authorizationHeaders(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 0
        while i < b.count {
            guard matches(b, i, "authorization:"), i == 0 || !isAlphanumeric(b[i - 1]), !p[i] else {
                i += 1
                continue
            }
            let start = i + 14
            var end = start
            var secret = false
            while end < b.count && b[end] != 0x0A && b[end] != 0x0D {
                if !p[end] && !isSpace(b[end]) { secret = true }
                end += 1
            }
            if secret { out.append(Replacement(range: start..<end, text: Array(" [Filtered]".utf8))) }
            i = end
        }
        return out
    }

    /// `Bearer <token>`: the token becomes `[Filtered]`.
    static func bearerTokens(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 0
        while i < b.count {
            guard matches(b, i, "bearer ") else {
                i += 1
                continue
            }
            let start = i + 7
            var end = start
            while end < b.count && !p[end] && isTokenByte(b[end]) { end += 1 }
            if end > start { out.append(Replacement(range: start..<end, text: filteredBytes)) }
            i = max(end, i + 1)
        }
        return out
    }

    /// `word=value` and `"word": "value"` where the word contains a key word.
    func keyValuePairs(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 0
        while i < b.count {
            guard Self.isWordByte(b[i]), !p[i] else {
                i += 1
                continue
            }
            let wordStart = i
            while i < b.count && Self.isWordByte(b[i]) && !p[i] { i += 1 }
            let wordEnd = i
            var j = wordEnd
            let quoted = wordStart > 0 && b[wordStart - 1] == 0x22 && j < b.count && b[j] == 0x22
            if quoted { j += 1 }
            while j < b.count && b[j] == 0x20 { j += 1 }
            guard j < b.count, b[j] == 0x3D || (quoted && b[j] == 0x3A) else { continue }
            j += 1
            while j < b.count && b[j] == 0x20 { j += 1 }
            if j < b.count && (b[j] == 0x22 || b[j] == 0x27) { j += 1 }
            let valueStart = j
            while j < b.count && !p[j] && !Self.endsValue(b[j]) { j += 1 }
            guard j > valueStart, containsKeyWord(Self.normalizedKey(Array(b[wordStart..<wordEnd]))) else { continue }
            out.append(Replacement(range: valueStart..<j, text: Self.filteredBytes))
            i = j
        }
        return out
    }

    /// `scheme://user:password@host`: the password becomes `[Filtered]`.
    static func urlCredentials(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 1
        while i + 2 < b.count {
            guard b[i] == 0x3A, b[i + 1] == 0x2F, b[i + 2] == 0x2F, isLetter(b[i - 1]) else {
                i += 1
                continue
            }
            var j = i + 3
            while j < b.count && isAuthorityByte(b[j]) && b[j] != 0x3A { j += 1 }
            i += 3
            guard j < b.count, b[j] == 0x3A else { continue }
            let start = j + 1
            var end = start
            while end < b.count && isAuthorityByte(b[end]) && b[end] != 0x3A && !p[end] { end += 1 }
            guard end > start, end < b.count, b[end] == 0x40 else { continue }
            out.append(Replacement(range: start..<end, text: filteredBytes))
            i = end
        }
        return out
    }

    /// Luhn-valid runs of 13 to 19 digits in groups joined by single spaces or dashes, standing alone.
    static func paymentCards(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        // One buffer for every digit run of the text: a stack frame holds dozens.
        var digits: [UInt8] = []
        var i = 0
        while i < b.count {
            guard isDigit(b[i]) else {
                i += 1
                continue
            }
            let start = i
            digits.removeAll(keepingCapacity: true)
            while true {
                while i < b.count && isDigit(b[i]) {
                    if digits.count < 20 { digits.append(b[i] - 0x30) }
                    i += 1
                }
                if i + 1 < b.count && (b[i] == 0x20 || b[i] == 0x2D) && isDigit(b[i + 1]) { i += 1 } else { break }
            }
            let alone = (start == 0 || !joins(b[start - 1])) && (i == b.count || !joins(b[i]))
            if alone && (13...19).contains(digits.count) && luhn(digits) {
                out.append(Replacement(range: start..<i, text: filteredBytes))
            }
        }
        return out
    }

    /// Whether the text holds a run the payment-card rule would filter (for invariant checks).
    public static func containsCardNumber(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return !paymentCards(bytes, Array(repeating: false, count: bytes.count)).isEmpty
    }

    static func luhn(_ digits: [UInt8]) -> Bool {
        var sum = 0
        for (n, d) in digits.reversed().enumerated() {
            let v = Int(d) * (n % 2 == 1 ? 2 : 1)
            sum += v > 9 ? v - 9 : v
        }
        return sum % 10 == 0
    }

    // MARK: - Optional rules

    /// IPv4 dotted quads and IPv6 text forms (with at least two colons) become `[ip]`.
    static func ipAddresses(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var i = 0
        while i < b.count {
            guard isHex(b[i]) || b[i] == 0x3A || b[i] == 0x2E, !p[i] else {
                i += 1
                continue
            }
            var start = i
            while i < b.count && (isHex(b[i]) || b[i] == 0x3A || b[i] == 0x2E) && !p[i] { i += 1 }
            var end = i
            // A marker beside it counts as a letter: the e-mail rule, which runs later, must not
            // turn `::1x@b.co` into an address on a second pass.
            if start > 0 && (isAlphanumeric(b[start - 1]) || p[start - 1]) || end < b.count && (isAlphanumeric(b[end]) || p[end]) {
                continue
            }
            while end > start && b[end - 1] == 0x2E { end -= 1 }
            if end - start >= 2 && b[start] == 0x3A && b[start + 1] != 0x3A { start += 1 }
            if end - start >= 2 && b[end - 1] == 0x3A && b[end - 2] != 0x3A { end -= 1 }
            let run = b[start..<end]
            if run.contains(0x3A) ? isIPv6(run) : isIPv4(run) {
                out.append(Replacement(range: start..<end, text: Array(ipMarker.utf8)))
            } else if let colon = run.firstIndex(of: 0x3A), isIPv4(b[start..<colon]) {
                // An IPv4 address with a port: `10.0.0.1:443`.
                out.append(Replacement(range: start..<colon, text: Array(ipMarker.utf8)))
            }
        }
        return out
    }

    static func isIPv4(_ run: ArraySlice<UInt8>) -> Bool {
        let parts = run.split(separator: 0x2E, omittingEmptySubsequences: false)
        return parts.count == 4
            && parts.allSatisfy { part in
                (1...3).contains(part.count) && part.allSatisfy(isDigit)
                    && part.reduce(0) { $0 * 10 + Int($1 - 0x30) } <= 255
            }
    }

    static func isIPv6(_ run: ArraySlice<UInt8>) -> Bool {
        guard run.count <= 45, run.filter({ $0 == 0x3A }).count >= 2 else { return false }
        let text = Array(run)
        var halves: [[UInt8]] = []
        if let gap = (0..<(text.count - 1)).first(where: { text[$0] == 0x3A && text[$0 + 1] == 0x3A }) {
            halves = [Array(text[..<gap]), Array(text[(gap + 2)...])]
            if halves[1].starts(with: [0x3A]) || halves.contains(where: { $0.count >= 2 && hasDoubleColon($0) }) { return false }
        } else {
            halves = [text]
        }
        var groups = 0
        for (h, half) in halves.enumerated() where !half.isEmpty {
            let parts = half.split(separator: 0x3A, omittingEmptySubsequences: false)
            for (n, part) in parts.enumerated() {
                let last = h == halves.count - 1 && n == parts.count - 1
                if last && part.contains(0x2E) {
                    guard isIPv4(part) else { return false }
                    groups += 2
                } else {
                    guard (1...4).contains(part.count), part.allSatisfy(isHex) else { return false }
                    groups += 1
                }
            }
        }
        return halves.count == 2 ? (1...7).contains(groups) : groups == 8
    }

    private static func hasDoubleColon(_ t: [UInt8]) -> Bool {
        (0..<(t.count - 1)).contains { t[$0] == 0x3A && t[$0 + 1] == 0x3A }
    }

    /// `local@domain.tld` becomes `[email]`.
    static func emailAddresses(_ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        var out: [Replacement] = []
        var lastEnd = 0
        for at in b.indices where b[at] == 0x40 && !p[at] && at >= lastEnd {
            var start = at
            while start > lastEnd && isLocalByte(b[start - 1]) && !p[start - 1] { start -= 1 }
            var end = at + 1
            while end < b.count && (isAlphanumeric(b[end]) || b[end] == 0x2E || b[end] == 0x2D) && !p[end] { end += 1 }
            while end > at + 1 && (b[end - 1] == 0x2E || b[end - 1] == 0x2D) { end -= 1 }
            guard start < at else { continue }
            let labels = b[(at + 1)..<end].split(separator: 0x2E, omittingEmptySubsequences: false)
            guard labels.count >= 2, labels.allSatisfy({ !$0.isEmpty }), let tld = labels.last, tld.count >= 2,
                tld.allSatisfy(isLetter)
            else { continue }
            out.append(Replacement(range: start..<end, text: Array(emailMarker.utf8)))
            lastEnd = end
        }
        return out
    }

    // MARK: - Bytes

    static let filteredBytes = Array(filtered.utf8)

    static func lower(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b | 0x20 : b }
    static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
    static func isLetter(_ b: UInt8) -> Bool { lower(b) >= 0x61 && lower(b) <= 0x7A }
    static func isAlphanumeric(_ b: UInt8) -> Bool { isDigit(b) || isLetter(b) }
    static func isHex(_ b: UInt8) -> Bool { isDigit(b) || (lower(b) >= 0x61 && lower(b) <= 0x66) }
    static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
    /// `[A-Za-z0-9._~+/=-]`
    static func isTokenByte(_ b: UInt8) -> Bool { isAlphanumeric(b) || "._~+/=-".utf8.contains(b) }
    /// `[A-Za-z0-9_.-]`
    static func isWordByte(_ b: UInt8) -> Bool { isAlphanumeric(b) || b == 0x5F || b == 0x2E || b == 0x2D }
    /// White space, `&`, `;`, `,`, `"`, `'`, `)`, `]`, `}`.
    static func endsValue(_ b: UInt8) -> Bool { b <= 0x20 || "&;,\"')]}".utf8.contains(b) }
    /// What may stand in a URL's user or password.
    static func isAuthorityByte(_ b: UInt8) -> Bool { b > 0x20 && b != 0x7F && !"/?#@\"'<>".utf8.contains(b) }
    static func isLocalByte(_ b: UInt8) -> Bool { isAlphanumeric(b) || "._%+-".utf8.contains(b) }
    /// A neighbour that makes a digit run part of something longer than a card number.
    static func joins(_ b: UInt8) -> Bool { isAlphanumeric(b) || b == 0x2D }

    /// Whether the text at `i` is `lowered` (ASCII lower case), compared case-insensitively.
    ///
    /// The rules ask at every byte of every string, and the first byte answers almost always:
    /// it is compared before the rest, from the literal's bytes (a `String`'s UTF-8 view
    /// iterated at each call was a quarter of the server's CPU at batch 100; docs/performance.md).
    static func matches(_ b: [UInt8], _ i: Int, _ lowered: StaticString) -> Bool {
        let count = lowered.utf8CodeUnitCount
        guard i >= 0, count <= b.count - i else { return false }
        let text = lowered.utf8Start
        guard count > 0 else { return true }
        guard lower(b[i]) == text[0] else { return false }
        for k in 1..<count where lower(b[i + k]) != text[k] { return false }
        return true
    }
}

/// One rule's replacement of a byte range by a marker.
struct Replacement {
    var range: Range<Int>
    var text: [UInt8]
}

/// The text being scrubbed and which of its bytes belong to markers (never matched again).
struct ScrubText {
    private(set) var bytes: [UInt8]
    private(set) var protected: [Bool]
    private(set) var changed = false

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        protected = Array(repeating: false, count: bytes.count)
        // Markers start with `[`: text without one (almost all) has nothing to protect.
        guard bytes.contains(0x5B) else { return }
        for m in Self.markers {
            var i = 0
            while i + m.count <= bytes.count {
                if bytes[i] == 0x5B && bytes[i..<(i + m.count)].elementsEqual(m) {
                    for k in i..<(i + m.count) { protected[k] = true }
                    i += m.count
                } else {
                    i += 1
                }
            }
        }
    }

    private static let markers = [ReportScrubber.filtered, ReportScrubber.ipMarker, ReportScrubber.emailMarker].map { Array($0.utf8) }

    /// Runs one rule over the whole text and applies its (ordered, disjoint) replacements.
    mutating func apply(_ rule: ([UInt8], [Bool]) -> [Replacement]) {
        let replacements = rule(bytes, protected)
        guard !replacements.isEmpty else { return }
        var newBytes: [UInt8] = []
        var newProtected: [Bool] = []
        newBytes.reserveCapacity(bytes.count + replacements.count * 11)
        newProtected.reserveCapacity(bytes.count + replacements.count * 11)
        var at = 0
        for r in replacements {
            newBytes += bytes[at..<r.range.lowerBound]
            newProtected += protected[at..<r.range.lowerBound]
            newBytes += r.text
            // The marker itself is protected; a leading space (the authorization rule's) is not.
            newProtected += r.text.map { $0 != 0x20 }
            at = r.range.upperBound
        }
        newBytes += bytes[at...]
        newProtected += protected[at...]
        bytes = newBytes
        protected = newProtected
        changed = true
    }
}
