import CrashWire
import Foundation

/// The crash list's search language (`q=`, triage.md "Search"), parsed: terms separated by
/// white space, all ANDed. A term is `[!]key:value`, `[!]word` or `[!]"phrase"`; a value may be
/// quoted (`screen:"check out"`), with `\"` and `\\` escaped inside quotes. Keys are
/// case-sensitive and the first `:` splits key and value; `!` negates the term.
///
/// Pure: no clock, no database. Relative times (`-24h`) stay relative here and are resolved
/// against the database's `now()` when the query runs. This file compiles alone with
/// CrashWire (the fuzz target FuzzSearchQuery builds it as it is).
struct SearchQuery: Sendable, Hashable {
    /// A time of `firstSeen:`/`lastSeen:`: RFC 3339, or a span before now.
    enum Time: Sendable, Hashable {
        /// The date and the text it was written as (kept so a query renders as it was read).
        case absolute(Date, text: String)
        /// `-<n>m|h|d|w`: this many seconds before now.
        case ago(seconds: Int64, text: String)
    }

    enum Comparison: String, Sendable, Hashable, CaseIterable {
        case greater = ">", greaterOrEqual = ">=", less = "<", lessOrEqual = "<="
    }

    /// `is:` values.
    enum State: String, Sendable, Hashable, CaseIterable {
        case open, resolved, ignored, regressed, snoozed, assigned, unassigned

        /// Whether the term names a status, which turns off the default hiding of ignored groups.
        var namesStatus: Bool { self != .assigned && self != .unassigned }
    }

    /// A term on the group's own fields.
    enum GroupTerm: Sendable, Hashable {
        case state(State)
        /// `assigned:<email>`, compared case-insensitively.
        case assignee(String)
        case kind(ReportKind)
        case firstSeen(Comparison, Time)
        case lastSeen(Comparison, Time)
        /// A free word or quoted phrase: the title contains it, case-insensitively.
        case title(String)
    }

    /// A term on each report: a group is listed when one of its reports in the window matches
    /// every report term.
    enum ReportTerm: Sendable, Hashable {
        case version(String)
        case environment(String)
        case os(String)
        case fatal(Bool)
        /// A `context` entry `key` with exactly `value`.
        case context(key: String, value: String)
    }

    struct Term<Value: Sendable & Hashable>: Sendable, Hashable {
        var negated: Bool
        var value: Value
    }

    var groupTerms: [Term<GroupTerm>] = []
    var reportTerms: [Term<ReportTerm>] = []

    /// The longest `q`, in UTF-8 bytes.
    static let maxBytes = 2048
    /// The longest relative time: 100 years.
    static let maxAgoSeconds: Int64 = 100 * 366 * 86_400

    var isEmpty: Bool { groupTerms.isEmpty && reportTerms.isEmpty }

    /// Whether an `is:` term names a status (negated or not): ignored groups are then not
    /// hidden by default.
    var namesStatus: Bool {
        groupTerms.contains { if case .state(let s) = $0.value { s.namesStatus } else { false } }
    }

    /// Parses `text`; nil or only white space is the empty query.
    static func parse(_ text: String?) throws(SearchQueryError) -> SearchQuery {
        guard let text else { return SearchQuery() }
        guard text.utf8.count <= maxBytes else {
            throw SearchQueryError("longer than \(maxBytes) bytes (\(text.utf8.count))")
        }
        var query = SearchQuery()
        var scanner = Scanner(Array(text.unicodeScalars))
        while let raw = try scanner.next() {
            try query.add(raw)
        }
        return query
    }

    /// The query written back in the language: parsing it gives this query again.
    var text: String {
        var parts: [String] = []
        for term in groupTerms {
            let body: String
            switch term.value {
            case .state(let s): body = "is:\(s.rawValue)"
            case .assignee(let email): body = "assigned:\(Self.quoted(email))"
            case .kind(let kind): body = "kind:\(kind.rawValue)"
            case .firstSeen(let op, let time): body = "firstSeen:\(op.rawValue)\(Self.text(time))"
            case .lastSeen(let op, let time): body = "lastSeen:\(op.rawValue)\(Self.text(time))"
            case .title(let word): body = Self.quoted(word, always: true)
            }
            parts.append((term.negated ? "!" : "") + body)
        }
        for term in reportTerms {
            let body: String
            switch term.value {
            case .version(let v): body = "version:\(Self.quoted(v))"
            case .environment(let e): body = "environment:\(Self.quoted(e))"
            case .os(let os): body = "os:\(Self.quoted(os))"
            case .fatal(let fatal): body = "fatal:\(fatal)"
            case .context(let key, let value): body = "\(key):\(Self.quoted(value))"
            }
            parts.append((term.negated ? "!" : "") + body)
        }
        return parts.joined(separator: " ")
    }

    // MARK: - Terms

    /// One term as the scanner read it: its key (nil for a word or phrase) and value.
    struct RawTerm {
        var negated: Bool
        var key: String?
        var value: String
    }

    private mutating func add(_ raw: RawTerm) throws(SearchQueryError) {
        let negated = raw.negated
        guard let key = raw.key else {
            groupTerms.append(Term(negated: negated, value: .title(raw.value)))
            return
        }
        let value = raw.value
        guard !value.isEmpty else { throw SearchQueryError("\(key): needs a value (\(key):<value>)") }
        func group(_ term: GroupTerm) { groupTerms.append(Term(negated: negated, value: term)) }
        func report(_ term: ReportTerm) { reportTerms.append(Term(negated: negated, value: term)) }
        switch key {
        case "is":
            guard let state = State(rawValue: value) else {
                throw SearchQueryError("is:\(value): not one of \(State.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            group(.state(state))
        case "assigned":
            group(.assignee(value))
        case "kind":
            guard let kind = ReportKind(rawValue: value) else {
                throw SearchQueryError("kind:\(value): not one of \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            group(.kind(kind))
        case "firstSeen":
            let (op, time) = try Self.comparison(key, value)
            group(.firstSeen(op, time))
        case "lastSeen":
            let (op, time) = try Self.comparison(key, value)
            group(.lastSeen(op, time))
        case "version", "release":
            report(.version(value))
        case "environment":
            if let problem = Report.environmentError(value) { throw SearchQueryError(problem) }
            report(.environment(value))
        case "os":
            report(.os(value))
        case "fatal":
            guard let fatal = Bool(value) else { throw SearchQueryError("fatal:\(value): must be true or false") }
            report(.fatal(fatal))
        default:
            report(.context(key: key, value: value))
        }
    }

    /// `<op><time>`, or Sentry's shorthand: `-24h` is `>=-24h`, `+24h` is `<=-24h`.
    private static func comparison(_ key: String, _ value: String) throws(SearchQueryError) -> (Comparison, Time) {
        var rest = Substring(value)
        var op: Comparison
        if rest.hasPrefix(">=") || rest.hasPrefix("<=") {
            op = Comparison(rawValue: String(rest.prefix(2)))!
            rest = rest.dropFirst(2)
        } else if rest.hasPrefix(">") || rest.hasPrefix("<") {
            op = Comparison(rawValue: String(rest.prefix(1)))!
            rest = rest.dropFirst(1)
        } else if rest.hasPrefix("+") {
            guard let seconds = ago(rest.dropFirst()) else { throw badTime(key, value) }
            return (.lessOrEqual, .ago(seconds: seconds, text: "-" + rest.dropFirst()))
        } else if rest.hasPrefix("-") {
            op = .greaterOrEqual
        } else if let first = rest.first, "=!".contains(first) {
            throw SearchQueryError("\(key):\(value): the operator must be >, >=, < or <=")
        } else {
            // A bare RFC 3339 time: no operator says which side.
            throw SearchQueryError("\(key):\(value): needs an operator (>, >=, <, <=) or a relative time like -24h")
        }
        if rest.hasPrefix("-"), let seconds = ago(rest.dropFirst()) {
            return (op, .ago(seconds: seconds, text: String(rest)))
        }
        guard let date = RFC3339.parse(String(rest)) else { throw badTime(key, value) }
        return (op, .absolute(date, text: String(rest)))
    }

    private static func badTime(_ key: String, _ value: String) -> SearchQueryError {
        SearchQueryError("\(key):\(value): the time must be RFC 3339 or relative like -24h (m, h, d or w), at most 100 years")
    }

    /// `<n>m|h|d|w` in seconds; nil when malformed or over ``maxAgoSeconds``.
    private static func ago(_ text: Substring) -> Int64? {
        guard let unit = text.last, text.count >= 2, text.count <= 12 else { return nil }
        let digits = text.dropLast()
        guard digits.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int64(digits) else { return nil }
        let scale: Int64
        switch unit {
        case "m": scale = 60
        case "h": scale = 3600
        case "d": scale = 86_400
        case "w": scale = 7 * 86_400
        default: return nil
        }
        let (seconds, overflow) = n.multipliedReportingOverflow(by: scale)
        guard !overflow, seconds <= maxAgoSeconds else { return nil }
        return seconds
    }

    private static func text(_ time: Time) -> String {
        switch time {
        case .absolute(_, let text), .ago(_, let text): text
        }
    }

    /// `value` as a term writes it: bare when it reads back the same, else in quotes.
    private static func quoted(_ value: String, always: Bool = false) -> String {
        let plain =
            !always && !value.isEmpty
            && !value.unicodeScalars.contains { Scanner.isSpace($0) || $0 == "\"" || $0 == "\\" }
        if plain { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            if scalar == "\"" || scalar == "\\" { out.unicodeScalars.append("\\") }
            out.unicodeScalars.append(scalar)
        }
        return out + "\""
    }

    // MARK: - Scanner

    /// Splits the text into terms: white space separates them (outside quotes), a quote opens a
    /// quoted stretch anywhere in a term.
    private struct Scanner {
        let scalars: [Unicode.Scalar]
        var i = 0

        init(_ scalars: [Unicode.Scalar]) { self.scalars = scalars }

        static func isSpace(_ s: Unicode.Scalar) -> Bool { s.properties.isWhitespace }

        mutating func next() throws(SearchQueryError) -> RawTerm? {
            while i < scalars.count, Self.isSpace(scalars[i]) { i += 1 }
            guard i < scalars.count else { return nil }
            var negated = false
            if scalars[i] == "!" {
                negated = true
                i += 1
                guard i < scalars.count, !Self.isSpace(scalars[i]) else {
                    throw SearchQueryError("a lone ! (write !term to negate a term)")
                }
            }
            // A term that starts with a quote is a phrase: its `:` split nothing.
            var key: String?
            var value = String.UnicodeScalarView()
            var sawQuote = false
            while i < scalars.count, !Self.isSpace(scalars[i]) {
                let s = scalars[i]
                if s == "\"" {
                    sawQuote = true
                    i += 1
                    try readQuoted(into: &value)
                    continue
                }
                if s == ":", key == nil, !sawQuote {
                    key = String(value)
                    value = String.UnicodeScalarView()
                    i += 1
                    continue
                }
                value.append(s)
                i += 1
            }
            if key == "" {
                // `:x` has no key: it is a word.
                key = nil
                value = String.UnicodeScalarView(":".unicodeScalars) + value
            }
            return RawTerm(negated: negated, key: key, value: String(value))
        }

        /// After an opening quote: up to the closing one, `\"` and `\\` unescaped.
        private mutating func readQuoted(into value: inout String.UnicodeScalarView) throws(SearchQueryError) {
            while i < scalars.count {
                let s = scalars[i]
                if s == "\\", i + 1 < scalars.count, scalars[i + 1] == "\"" || scalars[i + 1] == "\\" {
                    value.append(scalars[i + 1])
                    i += 2
                    continue
                }
                i += 1
                if s == "\"" { return }
                value.append(s)
            }
            throw SearchQueryError("an unclosed quote (close it with \")")
        }
    }
}

/// A `q` the search language cannot read; the message says what and where (the API answers
/// 400 with `q: <message>`).
struct SearchQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    let message: String

    init(_ message: String) { self.message = message }

    var description: String { message }
}
