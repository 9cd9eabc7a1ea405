import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension PostgresIngestStore {
    /// Everything a batch writes once its groups are locked and counted, in one statement (one
    /// round trip whatever the batch's count of reports; its bytes: below): the reports
    /// themselves, their rollup facts (one `rollup_pending` row per project: ``RollupFacts``),
    /// which ``RollupAggregator`` folds into the rollups after the commit, and the webhook outbox
    /// (``WebhookOutbox/eventRows(_:regressed:)``). Runs inside the ingest transaction, so a
    /// report and its facts commit together or not at all.
    ///
    /// No rollup row is written here: a batch appends its facts as one insert, whatever the
    /// count of rollup keys its reports touch, and locks no row another batch or the aggregator
    /// waits for (docs/server.md, "The rollup aggregator").
    ///
    /// A batch over ``maxStatementBytes`` (one request larger than the batch bytes: the batcher
    /// takes a batch's first request whatever its size) runs the same statement once per part
    /// of at most that many bytes (``statementParts(_:maxBytes:)``), each with its reports and
    /// their facts, the last with the outbox: a statement's binds are held twice while it is
    /// sent (the parameters, then the protocol message PostgresNIO copies them into), and
    /// PostgresNIO keeps the capacity of the largest message a connection has sent
    /// (docs/server.md, "Batch bytes").
    func writeReports(
        _ stored: [IngestItem], _ groupIDs: [Int64], regressed: Set<Int64>, _ connection: PostgresConnection
    ) async throws {
        let parts = Self.statementParts(stored, maxBytes: maxStatementBytes)
        for (index, part) in parts.enumerated() {
            let last = index == parts.count - 1
            let input = IngestSQL.WriteBatch.Input(
                stored: Array(stored[part]), groupIDs: Array(groupIDs[part]),
                alerts: last ? WebhookOutbox.eventRows(groupIDs, regressed: regressed) : ([], [], []))
            _ = try await connection.run(IngestSQL.WriteBatch.self, input, logger: logger)
        }
    }

    /// `items` cut, in order, into runs of at most `maxBytes` estimated bytes
    /// (``IngestItem/estimatedBytes``) each, a larger item alone; one run when they fit.
    static func statementParts(_ items: [IngestItem], maxBytes: Int) -> [Range<Int>] {
        var parts: [Range<Int>] = []
        var (start, bytes) = (0, 0)
        for (index, item) in items.enumerated() {
            let size = item.estimatedBytes
            if index > start && bytes + size > maxBytes {
                parts.append(start..<index)
                (start, bytes) = (index, 0)
            }
            bytes += size
        }
        parts.append(start..<items.count)
        return parts
    }
}

extension IngestSQL {
    enum WriteBatch: FixedStatement {
        struct Input {
            var stored: [IngestItem] = []
            /// The group of each of `stored`.
            var groupIDs: [Int64] = []
            var alerts: (ids: [Int64], counts: [Int64], regressed: [Int64]) = ([], [], [])

            /// The `rollup_pending` rows of `stored`: each project's reports and their encoded facts.
            var pending: (projects: [Int64], reports: [Int32], facts: [ByteBuffer]) {
                var order: [Int64] = []
                var facts: [Int64: [RollupFact]] = [:]
                for (item, group) in zip(stored, groupIDs) {
                    if facts[item.projectID] == nil { order.append(item.projectID) }
                    facts[item.projectID, default: []].append(RollupFact(item, group: group))
                }
                order.sort()
                return (order, order.map { Int32(facts[$0]!.count) }, order.map { RollupFacts.encode(facts[$0]!) })
            }
        }

        static let sql = query(Input()).sql

        static func query(_ input: Input) -> PostgresQuery {
            let stored = input.stored
            let (pending, alerts) = (input.pending, input.alerts)
            // Each report column is written from the items into the bind (``NullableArray``),
            // which keeps NULL apart from `""`; `stack`, `fingerprint` and `context` are JSON `text`
            // elements (``JSONColumn``). The groups of the alerts are probed by id (`LATERAL`): as a
            // join, the generic plan made on a fresh database read the whole of `crash_groups`
            // (docs/performance.md).
            return """
                WITH new_reports AS (
                    INSERT INTO reports (project_id, id, group_id, ts, kind, reason, stack, fatal, app_id, app_version,
                                         app_build, os, os_version, model, device_id, fingerprint, context, environment,
                                         scrubbed)
                    SELECT
                        unnest(\(NullableArray(stored) { $0.projectID })), unnest(\(NullableArray(stored) { $0.report.id })),
                        unnest(\(input.groupIDs)), unnest(\(NullableArray(stored) { $0.report.timestamp })),
                        unnest(\(NullableArray(stored) { $0.report.kind.rawValue })), unnest(\(NullableArray(stored) { $0.report.reason })),
                        unnest(\(NullableArray.json(stored) { JSONColumn.written($0.stack, into: &$1) })),
                        unnest(\(NullableArray(stored) { $0.report.fatal })), unnest(\(NullableArray(stored) { $0.report.app.id })),
                        unnest(\(NullableArray(stored) { $0.report.app.version })), unnest(\(NullableArray(stored) { $0.report.app.build })),
                        unnest(\(NullableArray(stored) { $0.report.device?.os })), unnest(\(NullableArray(stored) { $0.report.device?.osVersion })),
                        unnest(\(NullableArray(stored) { $0.report.device?.model })), unnest(\(NullableArray(stored) { $0.report.device?.id })),
                        unnest(\(NullableArray.json(stored) { JSONColumn.strings($0.report.fingerprint, into: &$1) })),
                        unnest(\(NullableArray.json(stored) { JSONColumn.object($0.report.context, into: &$1) })),
                        unnest(\(NullableArray(stored) { $0.report.environment ?? ReportLimits.defaultEnvironment })),
                        unnest(\(NullableArray(stored) { $0.scrubbed }))
                ), pending AS (
                    INSERT INTO rollup_pending (project_id, reports, facts)
                    SELECT unnest(\(pending.projects)), unnest(\(pending.reports)), unnest(\(pending.facts))
                )
                INSERT INTO webhook_deliveries (id, webhook_id, group_id, event)
                SELECT gen_random_uuid(), w.id, e.group_id, e.event
                FROM (
                    SELECT g.id AS group_id, g.project_id, 'group.new' AS event
                    FROM unnest(\(alerts.ids)::bigint[], \(alerts.counts)::bigint[]) AS b(id, n)
                    CROSS JOIN LATERAL (SELECT id, project_id FROM crash_groups WHERE id = b.id AND report_count = b.n LIMIT 1) g
                    UNION ALL
                    SELECT g.id, g.project_id, 'group.regressed' FROM crash_groups g WHERE g.id = ANY(\(alerts.regressed)::bigint[])
                ) e
                JOIN webhooks w ON w.project_id = e.project_id AND e.event = ANY(w.events)
                ORDER BY w.id, e.group_id
                """
        }
    }
}
