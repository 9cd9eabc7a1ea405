import CrashWire
import PostgresNIO

/// The group terms of a search (``SearchQuery/GroupTerm``) as SQL over `crash_groups`, each
/// value a bind: `\(searchTerms: query, prefix: "g.", status: ...)` appends one
/// `AND [NOT] COALESCE(<predicate>, false)` per term (nothing for none), so a negated term drops
/// exactly the groups the term keeps (a null assignee included). Report terms are not here: they
/// narrow the reports counted (``ReportPredicate``, `\(reportFilter:)`).
extension PostgresQuery.StringInterpolation {
    /// - Parameters:
    ///   - prefix: the table alias with its dot, or empty.
    ///   - status: the SQL expression of the group's status as the list shows it (a snooze
    ///     whose time has come reads `open`).
    mutating func appendInterpolation(searchTerms query: SearchQuery, prefix: String, status: String) {
        for term in query.groupTerms {
            appendLiteral(term.negated ? "\n  AND NOT COALESCE(" : "\n  AND COALESCE(")
            switch term.value {
            case .state(let state):
                switch state {
                case .open, .resolved, .ignored, .regressed:
                    appendLiteral("\(status) = ")
                    appendInterpolation(state.rawValue)
                case .snoozed:
                    appendLiteral(
                        "\(status) = 'ignored' AND (\(prefix)snooze_until IS NOT NULL OR \(prefix)snooze_count IS NOT NULL"
                            + " OR \(prefix)snooze_devices IS NOT NULL)")
                case .assigned:
                    appendLiteral("\(prefix)assignee IS NOT NULL")
                case .unassigned:
                    appendLiteral("\(prefix)assignee IS NULL")
                }
            case .assignee(let email):
                appendLiteral("lower(\(prefix)assignee) = lower(")
                appendInterpolation(email)
                appendLiteral(")")
            case .kind(let kind):
                appendLiteral("\(prefix)kind = ")
                appendInterpolation(kind.rawValue)
            case .firstSeen(let op, let time):
                appendLiteral("\(prefix)first_seen \(op.rawValue) ")
                appendInterpolation(searchTime: time)
            case .lastSeen(let op, let time):
                appendLiteral("\(prefix)last_seen \(op.rawValue) ")
                appendInterpolation(searchTime: time)
            case .title(let text):
                // A substring, case-insensitively: strpos, so `%` and `_` are plain characters.
                appendLiteral("strpos(lower(\(prefix)title), lower(")
                appendInterpolation(text)
                appendLiteral(")) > 0")
            }
            appendLiteral(", false)")
        }
    }

    /// An absolute time as a bind; a relative one as the database's `now()` minus its seconds.
    mutating func appendInterpolation(searchTime time: SearchQuery.Time) {
        switch time {
        case .absolute(let date, _):
            appendInterpolation(date)
        case .ago(let seconds, _):
            appendLiteral("(now() - ")
            appendInterpolation(seconds)
            appendLiteral(" * interval '1 second')")
        }
    }
}
