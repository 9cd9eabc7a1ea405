import PostgresNIO

/// The predicates the query reads share, each written once and interpolated with its binds
/// (`\(reportFilter: filters)`), so every read filters reports and groups the same way.
extension PostgresQuery.StringInterpolation {
    /// The report filters (`app`, `version`, `os`, `environment`) and report search terms
    /// (``ReportPredicate``) over a rollup with `app_id`, `app_version`, `os` and `environment`
    /// columns, or over `reports` (`onReports`); an unset filter matches every row.
    ///
    /// `os` is `NOT NULL` (empty when unknown) in the rollups and nullable in `reports`: there it
    /// compares `COALESCE(os, '')`, so both read a missing OS as `''`. Only `reports` has `fatal`
    /// and `context`: over a rollup, `fatal:` is its count column (``rollupCount:``) and a
    /// `context` term never reaches it (``RollupLevel/reports``).
    mutating func appendInterpolation(reportFilter f: GroupFilters, onReports: Bool = false) {
        let p = f.reports
        let os = onReports ? "COALESCE(os, '')" : "os"
        appendLiteral("(app_id = ALL(")
        appendInterpolation(p.apps)
        appendLiteral("::text[]) AND app_version = ALL(")
        appendInterpolation(p.versions)
        appendLiteral("::text[]) AND app_version <> ALL(")
        appendInterpolation(p.notVersions)
        appendLiteral("::text[])\n  AND \(os) = ALL(")
        appendInterpolation(p.oses)
        appendLiteral("::text[]) AND \(os) <> ALL(")
        appendInterpolation(p.notOSes)
        appendLiteral("::text[])\n  AND (cardinality(")
        appendInterpolation(p.anyEnvironment)
        appendLiteral("::text[]) = 0 OR environment = ANY(")
        appendInterpolation(p.anyEnvironment)
        appendLiteral("::text[])) AND environment = ALL(")
        appendInterpolation(p.environments)
        appendLiteral("::text[]) AND environment <> ALL(")
        appendInterpolation(p.notEnvironments)
        appendLiteral("::text[]) AND NOT ")
        appendInterpolation(p.impossible)
        defer { appendLiteral(")") }
        guard onReports else { return }
        appendLiteral("\n  AND (")
        appendInterpolation(p.fatal)
        appendLiteral("::boolean IS NULL OR COALESCE(fatal, false) = ")
        appendInterpolation(p.fatal)
        // Context terms read the report's JSON text only when there are any.
        appendLiteral(
            ")\n  AND NOT EXISTS (SELECT 1 FROM unnest(")
        appendInterpolation(p.contextKeys)
        appendLiteral("::text[], ")
        appendInterpolation(p.contextValues)
        appendLiteral(
            "::text[]) AS c(k, v) WHERE (COALESCE(context, context_jsonb::text)::jsonb ->> c.k) IS DISTINCT FROM c.v)"
                + "\n  AND NOT EXISTS (SELECT 1 FROM unnest(")
        appendInterpolation(p.notContextKeys)
        appendLiteral("::text[], ")
        appendInterpolation(p.notContextValues)
        appendLiteral("::text[]) AS c(k, v) WHERE (COALESCE(context, context_jsonb::text)::jsonb ->> c.k) = c.v)")
    }

    /// A `group_hourly` row's count under the `fatal:` terms: `count`, `fatal_count` or their
    /// difference.
    mutating func appendInterpolation(rollupCount f: GroupFilters) {
        let fatal = f.reports.fatal
        appendLiteral("CASE WHEN ")
        appendInterpolation(fatal)
        appendLiteral("::boolean IS NULL THEN count WHEN ")
        appendInterpolation(fatal)
        appendLiteral("::boolean THEN fatal_count ELSE count - fatal_count END")
    }

    /// `environment = ANY(names)` when names are given, else true: the `environment=`
    /// parameter over a table with an `environment` column.
    mutating func appendInterpolation(environmentFilter names: [String]) {
        appendLiteral("(cardinality(")
        appendInterpolation(names)
        appendLiteral("::text[]) = 0 OR environment = ANY(")
        appendInterpolation(names)
        appendLiteral("::text[]))")
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
        appendLiteral("::text IS NULL THEN ")
        appendInterpolation(f.showsIgnored)
        appendLiteral(" OR \(status) <> 'ignored' ELSE \(status) = ")
        appendInterpolation(f.status)
        appendLiteral(" END")
        appendInterpolation(searchTerms: f.search, prefix: prefix, status: status)
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

    /// The transactions (`xid8`, as `reports.xact`) whose reports of `project` the rollups do not
    /// hold yet in this snapshot: those of its `rollup_pending` rows. A row's `xmin` is the 32-bit
    /// id of the ingest transaction that wrote it and its reports; its epoch is the snapshot's
    /// `xmax`'s, or the one before when the id is above the low half of `xmax` (pending rows live
    /// seconds, far less than an epoch).
    ///
    /// The ids come as the elements of an array computed once (`unnest(ARRAY(...))`), so the
    /// reports are found by `(project_id, xact)`, a probe per pending batch. As a subquery joined
    /// on its expression, PostgreSQL hashed it and read every report of the project in the window
    /// to match them: 943 ms a count at 124,000 reports against 0.9 ms, so each read during a
    /// burst cost more the more the project held.
    mutating func appendInterpolation(pendingXactsOf project: Int64) {
        appendLiteral(
            """
            SELECT unnest(ARRAY(
                SELECT ((((x.n >> 32) - CASE WHEN p.xmin::text::bigint > (x.n & 4294967295) THEN 1 ELSE 0 END) << 32)
                        | p.xmin::text::bigint)::text::xid8
                FROM rollup_pending p, (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS n) x
                WHERE p.project_id
            """)
        appendLiteral(" = ")
        appendInterpolation(project)
        appendLiteral("))")
    }

    /// `column >= from AND column < to`: one piece of a ``TimeWindow/Plan``.
    mutating func appendInterpolation(_ column: StaticString, in range: TimeRange) {
        appendLiteral("\(column) >= ")
        appendInterpolation(range.from)
        appendLiteral(" AND \(column) < ")
        appendInterpolation(range.to)
    }

    /// The hour entries inside `ranges` of a table of days with their hours
    /// (`group_environment_model_daily`, `group_environment_hours`) read as `m`, with
    /// `crashguard_model_hours(m.hours)` as `e`: the days the ranges touch (an index condition on
    /// `m.day`), then the hours in them. Empty ranges are left out; none left is `false`.
    mutating func appendInterpolation(dayHoursIn ranges: [TimeRange]) {
        let ranges = ranges.filter { !$0.isEmpty }
        guard !ranges.isEmpty else { return appendLiteral("false") }
        appendInterpolation("m.day", inAny: ranges.map(\.days))
        appendLiteral(" AND ")
        appendInterpolation("m.day + e.hour * interval '1 hour'", inAny: ranges)
    }

    /// `(column >= from AND column < to OR ...)` over `ranges` (none of them empty): a single
    /// range is then an index condition on `column`, where an `OR` with an empty one is a
    /// filter over every row the other conditions find.
    mutating func appendInterpolation(_ column: StaticString, inAny ranges: [TimeRange]) {
        appendLiteral("(")
        for (i, range) in ranges.enumerated() {
            if i > 0 { appendLiteral(" OR ") }
            appendInterpolation(column, in: range)
        }
        appendLiteral(")")
    }
}
