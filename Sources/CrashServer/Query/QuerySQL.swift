import PostgresNIO

/// The predicates the query reads share, each written once and interpolated with its binds
/// (`\(reportFilter: filters)`), so every read filters reports and groups the same way.
extension PostgresQuery.StringInterpolation {
    /// The report filters (`app`, `version`, `os`) over a table with `app_id`, `app_version`
    /// and `os` columns; an unset filter matches every row.
    ///
    /// `os` is `NOT NULL` (empty when unknown) in the rollups and nullable in `reports`: there
    /// `nullableOS` compares `COALESCE(os, '')`, so both read a missing OS as `''`.
    mutating func appendInterpolation(reportFilter f: GroupFilters, nullableOS: Bool = false) {
        appendLiteral("(")
        appendInterpolation(f.app)
        appendLiteral("::text IS NULL OR app_id = ")
        appendInterpolation(f.app)
        appendLiteral(") AND (")
        appendInterpolation(f.version)
        appendLiteral("::text IS NULL OR app_version = ")
        appendInterpolation(f.version)
        appendLiteral(")\n  AND (")
        appendInterpolation(f.os)
        appendLiteral(nullableOS ? "::text IS NULL OR COALESCE(os, '') = " : "::text IS NULL OR os = ")
        appendInterpolation(f.os)
        appendLiteral(")")
    }

    /// The group filters (`kind`, `status`) over `crash_groups` (as `alias` when given). Without
    /// a status every group but the ignored ones passes (contract: only ignored groups are
    /// hidden from the default list); groups merged into another never pass (triage.md).
    mutating func appendInterpolation(groupFilter f: GroupFilters, alias: StaticString? = nil) {
        let prefix = alias.map { "\($0)." } ?? ""
        appendLiteral("(")
        appendInterpolation(f.kind)
        appendLiteral("::text IS NULL OR \(prefix)kind = ")
        appendInterpolation(f.kind)
        // A snooze whose time has come counts as open; merged groups are never listed.
        let status = "(CASE WHEN \(prefix)snooze_until <= now() THEN 'open' ELSE \(prefix)status END)"
        appendLiteral(")\n  AND \(prefix)merged_into IS NULL AND CASE WHEN ")
        appendInterpolation(f.status)
        appendLiteral("::text IS NULL THEN \(status) <> 'ignored' ELSE \(status) = ")
        appendInterpolation(f.status)
        appendLiteral(" END")
    }

    /// The release queries' session filters (`environment`, `app`) over a session table;
    /// an unset filter matches every row.
    mutating func appendInterpolation(sessionFilter f: SessionFilters) {
        appendLiteral("(")
        appendInterpolation(f.environment)
        appendLiteral("::text IS NULL OR environment = ")
        appendInterpolation(f.environment)
        appendLiteral(") AND (")
        appendInterpolation(f.app)
        appendLiteral("::text IS NULL OR app_id = ")
        appendInterpolation(f.app)
        appendLiteral(")")
    }

    /// `column >= from AND column < to`: one piece of a ``TimeWindow/Plan``.
    mutating func appendInterpolation(_ column: StaticString, in range: TimeRange) {
        appendLiteral("\(column) >= ")
        appendInterpolation(range.from)
        appendLiteral(" AND \(column) < ")
        appendInterpolation(range.to)
    }
}
