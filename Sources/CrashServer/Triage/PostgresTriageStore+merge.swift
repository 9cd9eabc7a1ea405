import Foundation
import Logging
import PostgresNIO

/// Merge and unmerge (triage.md): a merge sets the source's `merged_into`, nothing else. The
/// source's reports and rollups stay keyed by it, and the reads count a group with its members
/// (MergeSQL.swift), so the target counts the source's past and future reports and an unmerge
/// gives them back exactly; ingest applies a merged group's regressions and snoozes to its
/// target (``PostgresIngestStore``).
extension PostgresTriageStore {
    func merge(project: Int64, source: Int64, into: Int64, actor: Principal) async throws -> MergeOutcome {
        let outcome = try await database.client.withTransactionEndingOnClose(logger: database.logger) { connection -> MergeOutcome in
            // Locks, in id order, the source, the asked target and the group it is merged into,
            // and the groups merged into the source (they move with it).
            let rows = try await connection.query(
                """
                SELECT id, merged_into FROM crash_groups
                WHERE project_id = \(project)
                  AND (id = ANY(\([source, into])) OR merged_into = \(source)
                       OR id = (SELECT merged_into FROM crash_groups WHERE id = \(into) AND project_id = \(project)))
                ORDER BY id FOR UPDATE
                """, logger: database.logger)
            var mergedInto: [Int64: Int64?] = [:]
            for try await (id, target) in rows.decode((Int64, Int64?).self) { mergedInto[id] = target }
            guard let sourceRow = mergedInto[source] else { return .unknownSource }
            guard let intoRow = mergedInto[into] else { return .unknownTarget }
            if let current = sourceRow { return .sourceMerged(into: current) }
            // Chains stay one level deep: into a merged group means into its target.
            let target = intoRow ?? into
            guard target != source else { return .cycle }
            let moved = [source] + mergedInto.filter { $0.value == source }.map(\.key).sorted()
            try await connection.query(
                "UPDATE crash_groups SET merged_into = \(target) WHERE id = ANY(\(moved))", logger: database.logger)
            try await Self.record(.merged, moved: moved, target: target, actor: actor, connection, logger: database.logger)
            return .merged(target: target)
        }
        if case .merged = outcome { try await database.noteWrite() }
        return outcome
    }

    func unmerge(project: Int64, target: Int64, source: Int64, actor: Principal) async throws -> UnmergeOutcome {
        let outcome = try await database.client.withTransactionEndingOnClose(logger: database.logger) { connection -> UnmergeOutcome in
            let rows = try await connection.query(
                """
                SELECT id, merged_into FROM crash_groups WHERE project_id = \(project) AND id = ANY(\([target, source].sorted()))
                ORDER BY id FOR UPDATE
                """, logger: database.logger)
            var mergedInto: [Int64: Int64?] = [:]
            for try await (id, into) in rows.decode((Int64, Int64?).self) { mergedInto[id] = into }
            guard mergedInto[target] != nil else { return .unknownTarget }
            guard mergedInto[source] == .some(target) else { return .notMerged }
            try await connection.query(
                "UPDATE crash_groups SET merged_into = NULL WHERE id = \(source)", logger: database.logger)
            try await Self.record(.unmerged, moved: [source], target: target, actor: actor, connection, logger: database.logger)
            return .unmerged
        }
        if outcome == .unmerged { try await database.noteWrite() }
        return outcome
    }

    /// A `merged` or `unmerged` entry `{"group", "into"}` on each moved group and on the target.
    private static func record(
        _ type: ActivityType, moved: [Int64], target: Int64, actor: Principal, _ connection: PostgresConnection, logger: Logger
    ) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var ids: [Int64] = [], data: [String] = []
        for group in moved {
            let text = String(decoding: try encoder.encode(["group": String(group), "into": String(target)]), as: UTF8.self)
            ids += [group, target]
            data += [text, text]
        }
        try await connection.query(
            """
            INSERT INTO group_activity (group_id, type, actor, data)
            SELECT g, \(type.rawValue), \(actor.name), d FROM unnest(\(ids)::bigint[], \(data)::text[]) WITH ORDINALITY AS x(g, d, n)
            ORDER BY n
            """, logger: logger)
    }
}
