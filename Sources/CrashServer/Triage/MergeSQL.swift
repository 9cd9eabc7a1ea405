import PostgresNIO

/// How reads count merged groups (triage.md, "Merge and unmerge"). A merge writes only
/// `crash_groups.merged_into` of the source: reports and rollups stay keyed by the group their
/// signature made (so an unmerge, or the source's own detail, gives back exactly its own
/// figures), and a read of a group counts the rows of its *members*: itself and the groups
/// merged into it. Chains are one level deep, so the members of a group are one index probe
/// (`crash_groups_merged_into`).
extension PostgresQuery.StringInterpolation {
    /// The members of `group` as an array: `group_id = ANY(\(members: id))` reads the rows of
    /// the group and of those merged into it (an init plan, evaluated once per statement).
    mutating func appendInterpolation(members group: Int64) {
        appendLiteral("ARRAY(SELECT ")
        appendInterpolation(group)
        appendLiteral("::bigint UNION ALL SELECT id FROM crash_groups WHERE merged_into = ")
        appendInterpolation(group)
        appendLiteral(")")
    }

    /// `(owner, member)` pairs for `ids`: each id with itself and with every group merged into
    /// it. Join a rollup's `group_id` to `member` and group by `owner` to count each asked
    /// group with its members.
    mutating func appendInterpolation(owners ids: [Int64]) {
        appendLiteral("(SELECT x AS owner, x AS member FROM unnest(")
        appendInterpolation(ids)
        appendLiteral("::bigint[]) AS x UNION ALL SELECT merged_into, id FROM crash_groups WHERE merged_into = ANY(")
        appendInterpolation(ids)
        appendLiteral("::bigint[]))")
    }

    /// The merged figures of the project's merge targets (groups others are merged into): the
    /// id, the report count of the group and its members, and their first and last seen times.
    /// The list's candidate walks read a target through this instead of its own row, whose
    /// count and times leave out its members.
    mutating func appendInterpolation(mergeTargetsOf project: Int64) {
        appendLiteral(
            """
            (SELECT t.id, (t.report_count + sum(m.report_count))::bigint AS report_count,
                    LEAST(t.first_seen, min(m.first_seen)) AS first_seen, GREATEST(t.last_seen, max(m.last_seen)) AS last_seen
             FROM crash_groups m JOIN crash_groups t ON t.id = m.merged_into
             WHERE m.merged_into IS NOT NULL AND m.project_id = 
            """)
        appendInterpolation(project)
        appendLiteral(" GROUP BY t.id)")
    }
}

extension PostgresQueryStore.Reader {
    /// `ids` and the groups merged into them (the members a count of `ids` reads).
    func memberIDs(_ ids: [Int64]) async throws -> [Int64] {
        let rows = try await connection.query(
            "SELECT id FROM crash_groups WHERE merged_into = ANY(\(ids)::bigint[])", logger: logger)
        var out = ids
        for try await id in rows.decode(Int64.self) { out.append(id) }
        return out
    }
}

extension PostgresQueryStore.Reader {
    /// The project's merge targets: the groups other groups are merged into.
    func mergeTargets(project: Int64) async throws -> [Int64] {
        let rows = try await connection.query(
            """
            SELECT DISTINCT merged_into FROM crash_groups WHERE merged_into IS NOT NULL AND project_id = \(project)
            """, logger: logger)
        var out: [Int64] = []
        for try await id in rows.decode(Int64.self) { out.append(id) }
        return out
    }
}
