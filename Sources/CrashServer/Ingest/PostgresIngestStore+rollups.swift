import CrashWire
import Foundation
import PostgresNIO

extension PostgresIngestStore {
    /// Everything a batch writes once its groups are locked and counted, in one statement (one
    /// round trip whatever the batch's count of reports; its bytes: below): the reports
    /// themselves, the hourly rollups that window queries read instead of raw reports, the
    /// query rollups (``queryRollupRows(_:_:)``), the version rollups and their sketches
    /// (``versionRollupRows(_:_:_:)``, which reads the stored sketches first) and the webhook
    /// outbox (``WebhookOutbox/eventRows(_:regressed:)``). Runs inside the ingest transaction, so
    /// rollups and reports never disagree.
    ///
    /// Every part is keyed by a group this transaction holds (inserted, or locked `FOR UPDATE`:
    /// ``IngestSQL/ClaimAndCount``), except
    /// `project_hourly`, whose keys are sorted; so the parts' order within the statement, which
    /// PostgreSQL does not define, cannot make two batches wait on each other in a cycle that the
    /// group locks did not already prevent.
    ///
    /// A batch over ``maxStatementBytes`` (one request larger than the batch bytes: the batcher
    /// takes a batch's first request whatever its size) runs the same statement once per part
    /// of at most that many bytes (``statementParts(_:maxBytes:)``), the parts before the last
    /// with its reports alone and the last with the rollups of the whole batch: a statement's
    /// binds are held twice while it is sent (the parameters, then the protocol message
    /// PostgresNIO copies them into), and PostgresNIO keeps the capacity of the largest message
    /// a connection has sent (docs/server.md, "Batch bytes").
    func writeReportsAndRollups(
        _ stored: [IngestItem], _ groupIDs: [Int64], regressed: Set<Int64>, _ connection: PostgresConnection
    ) async throws {
        let text = BatchText(stored)
        var counts: [HourlyKey: (n: Int64, fatal: Int64)] = [:]
        for ((item, group), ranks) in zip(zip(stored, groupIDs), text.reports) {
            let hour = TimeWindow.floor(item.report.timestamp, TimeWindow.hour)
            let key = HourlyKey(
                project: item.projectID, hour: hour, group: group, app: ranks.app, version: ranks.version, os: ranks.os,
                environment: ranks.environment)
            Self.count(&counts[key, default: (0, 0)], fatal: item.report.fatal == true)
        }
        let (hourly, daily) = try await versionRollupRows(stored, groupIDs, text, connection)
        let parts = Self.statementParts(stored, maxBytes: maxStatementBytes)
        for part in parts.dropLast() {
            let reports = IngestSQL.WriteBatch.Input(stored: Array(stored[part]), groupIDs: Array(groupIDs[part]))
            _ = try await connection.run(IngestSQL.WriteBatch.self, reports, logger: logger)
        }
        let last = parts[parts.count - 1]
        let input = IngestSQL.WriteBatch.Input(
            stored: Array(stored[last]), groupIDs: Array(groupIDs[last]), text: text,
            hourly: counts.sorted { $0.key < $1.key }.map { ($0.key, $0.value.n, $0.value.fatal) },
            rollups: queryRollupRows(stored, groupIDs, text), versionHourly: hourly, versionDaily: daily,
            alerts: WebhookOutbox.eventRows(groupIDs, regressed: regressed))
        _ = try await connection.run(IngestSQL.WriteBatch.self, input, logger: logger)
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

    /// One hash per report: the entry is made (or found) and changed in place.
    private static func count(_ entry: inout (n: Int64, fatal: Int64), fatal: Bool) {
        entry.n += 1
        if fatal { entry.fatal += 1 }
    }

    /// `app`, `version`, `os` and `environment` are ``BatchText`` ranks.
    struct HourlyKey: Hashable, Comparable {
        var project: Int64, hour: Date, group: Int64, app: Int32, version: Int32, os: Int32, environment: Int32
        static func < (a: HourlyKey, b: HourlyKey) -> Bool {
            let (x, y) = ((a.project, a.hour, a.group, a.app, a.version, a.os), (b.project, b.hour, b.group, b.app, b.version, b.os))
            return x != y ? x < y : a.environment < b.environment
        }
    }

}

extension IngestSQL {
    enum WriteBatch: FixedStatement {
        struct Input {
            var stored: [IngestItem] = []
            /// The group of each of `stored`.
            var groupIDs: [Int64] = []
            /// What the keys' ranks stand for.
            var text = BatchText([])
            var hourly: [(key: PostgresIngestStore.HourlyKey, n: Int64, fatal: Int64)] = []
            var rollups = PostgresIngestStore.QueryRollupRows.empty
            var versionHourly: [PostgresIngestStore.VersionRollupRow] = []
            var versionDaily: [PostgresIngestStore.VersionRollupRow] = []
            var alerts: (ids: [Int64], counts: [Int64], regressed: [Int64]) = ([], [], [])
        }

        static let sql = query(Input()).sql

        static func query(_ input: Input) -> PostgresQuery {
            let reports = input.stored.map(\.report)
            let (hourly, text) = (input.hourly, input.text)
            let (days, facets, models, projects) = (input.rollups.days, input.rollups.facets, input.rollups.models, input.rollups.projects)
            let (versionHourly, versionDaily, alerts) = (input.versionHourly, input.versionDaily, input.alerts)
            // Nullable report columns keep NULL apart from `""` (``NullableArray``); `stack`,
            // `fingerprint` and `context` are JSON `text` elements written by ``JSONWriter``. The
            // groups of the alerts are probed by id (`LATERAL`): as a join, the generic plan made on
            // a fresh database read the whole of `crash_groups` (docs/performance.md).
            return """
                WITH new_reports AS (
                    INSERT INTO reports (project_id, id, group_id, ts, kind, reason, stack, fatal, app_id, app_version,
                                         app_build, os, os_version, model, device_id, fingerprint, context, environment,
                                         scrubbed)
                    SELECT
                        unnest(\(input.stored.map(\.projectID))), unnest(\(reports.map(\.id))), unnest(\(input.groupIDs)), unnest(\(reports.map(\.timestamp))),
                        unnest(\(reports.map(\.kind.rawValue))), unnest(\(reports.map(\.reason))), unnest(\(NullableArray(input.stored.map { $0.stack.map(JSONColumn.written) }))),
                        unnest(\(NullableArray(reports.map(\.fatal)))), unnest(\(reports.map(\.app.id))), unnest(\(reports.map(\.app.version))),
                        unnest(\(NullableArray(reports.map(\.app.build)))), unnest(\(NullableArray(reports.map { $0.device?.os }))),
                        unnest(\(NullableArray(reports.map { $0.device?.osVersion }))), unnest(\(NullableArray(reports.map { $0.device?.model }))),
                        unnest(\(NullableArray(reports.map { $0.device?.id }))), unnest(\(NullableArray(reports.map { $0.fingerprint.map(JSONColumn.strings) }))),
                        unnest(\(NullableArray(reports.map { $0.context.map(JSONColumn.object) }))),
                        unnest(\(reports.map { $0.environment ?? ReportLimits.defaultEnvironment })),
                        unnest(\(input.stored.map(\.scrubbed)))
                ), hourly AS (
                    INSERT INTO group_hourly AS t (project_id, group_id, hour, app_id, app_version, os, environment, count, fatal_count)
                    SELECT unnest(\(hourly.map(\.key.project))), unnest(\(hourly.map(\.key.group))), unnest(\(hourly.map(\.key.hour))),
                           unnest(\(hourly.map { text[$0.key.app] })), unnest(\(hourly.map { text[$0.key.version] })),
                           unnest(\(hourly.map { text[$0.key.os] })), unnest(\(hourly.map { text[$0.key.environment] })),
                           unnest(\(hourly.map(\.n))), unnest(\(hourly.map(\.fatal)))
                    ON CONFLICT (project_id, hour, group_id, app_id, app_version, os, environment) DO UPDATE SET
                        count = t.count + EXCLUDED.count, fatal_count = t.fatal_count + EXCLUDED.fatal_count
                ), daily AS (
                    INSERT INTO group_daily AS t (project_id, group_id, day, app_id, app_version, os, environment, count)
                    SELECT unnest(\(days.map(\.key.project))), unnest(\(days.map(\.key.group))), unnest(\(days.map(\.key.day))),
                           unnest(\(days.map { text[$0.key.app] })), unnest(\(days.map { text[$0.key.version] })),
                           unnest(\(days.map { text[$0.key.os] })), unnest(\(days.map { text[$0.key.environment] })),
                           unnest(\(days.map(\.value)))
                    ON CONFLICT (project_id, day, group_id, app_id, app_version, os, environment) DO UPDATE SET count = t.count + EXCLUDED.count
                ), facets AS (
                    INSERT INTO group_facets AS t (project_id, group_id, facet, value, count, first_seen, last_seen)
                    SELECT unnest(\(facets.map(\.key.project))), unnest(\(facets.map(\.key.group))), unnest(\(facets.map { text[$0.key.facet] })),
                           unnest(\(facets.map { text[$0.key.value] })), unnest(\(facets.map(\.value.n))), unnest(\(facets.map(\.value.first))),
                           unnest(\(facets.map(\.value.last)))
                    ON CONFLICT (group_id, facet, value) DO UPDATE SET count = t.count + EXCLUDED.count,
                        first_seen = LEAST(t.first_seen, EXCLUDED.first_seen), last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)
                ), models AS (
                    INSERT INTO group_model_hourly AS t (group_id, hour, model, count)
                    SELECT unnest(\(models.map(\.key.group))), unnest(\(models.map(\.key.hour))), unnest(\(models.map { text[$0.key.model] })),
                           unnest(\(models.map(\.value)))
                    ON CONFLICT (group_id, hour, model) DO UPDATE SET count = t.count + EXCLUDED.count
                ), projects AS (
                    INSERT INTO project_hourly AS t (project_id, hour, kind, app_version, environment, count)
                    SELECT unnest(\(projects.map(\.key.project))), unnest(\(projects.map(\.key.hour))), unnest(\(projects.map { text[$0.key.kind] })),
                           unnest(\(projects.map { text[$0.key.version] })), unnest(\(projects.map { text[$0.key.environment] })),
                           unnest(\(projects.map(\.value)))
                    ON CONFLICT (project_id, hour, kind, app_version, environment) DO UPDATE SET count = t.count + EXCLUDED.count
                ), version_hourly AS (
                    INSERT INTO group_version_hourly AS t (group_id, app_version, hour, count, sketch)
                    SELECT unnest(\(versionHourly.map(\.key.group))), unnest(\(versionHourly.map { text[$0.key.version] })),
                           unnest(\(versionHourly.map(\.key.bucket))), unnest(\(versionHourly.map(\.count))), unnest(\(versionHourly.map(\.sketch)))
                    ON CONFLICT (group_id, app_version, hour) DO UPDATE SET count = t.count + EXCLUDED.count,
                        sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
                ), version_daily AS (
                    INSERT INTO group_version_daily AS t (group_id, app_version, day, count, sketch)
                    SELECT unnest(\(versionDaily.map(\.key.group))), unnest(\(versionDaily.map { text[$0.key.version] })),
                           unnest(\(versionDaily.map(\.key.bucket))), unnest(\(versionDaily.map(\.count))), unnest(\(versionDaily.map(\.sketch)))
                    ON CONFLICT (group_id, app_version, day) DO UPDATE SET count = t.count + EXCLUDED.count,
                        sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
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
