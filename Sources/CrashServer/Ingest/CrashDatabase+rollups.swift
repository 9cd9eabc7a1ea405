import CrashWire
import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Adds newly stored reports to the hourly rollups that window queries read instead
    /// of raw reports. Runs inside the ingest transaction, so rollups and reports never
    /// disagree.
    func writeRollups(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        struct Key: Hashable, Comparable {
            var project: Int64, hour: Int64, group: Int64, app: String, version: String, os: String
            static func < (a: Key, b: Key) -> Bool {
                (a.project, a.hour, a.group, a.app, a.version, a.os) < (b.project, b.hour, b.group, b.app, b.version, b.os)
            }
        }
        var counts: [Key: (n: Int64, fatal: Int64)] = [:]
        for item in stored {
            let hour = Int64(TimeWindow.floor(item.report.timestamp, TimeWindow.hour).timeIntervalSince1970)
            let key = Key(
                project: item.projectID, hour: hour, group: groups[item.groupKey]!,
                app: item.report.app.id, version: item.report.app.version, os: item.report.device?.os ?? "")
            var c = counts[key, default: (0, 0)]
            c.n += 1
            if item.report.fatal == true { c.fatal += 1 }
            counts[key] = c
        }
        struct Row: Encodable {
            var p: Int64, g: Int64, h: Date, a: String, v: String, o: String, n: Int64, f: Int64
        }
        let rows = counts.keys.sorted().map { k in
            Row(
                p: k.project, g: k.group, h: Date(timeIntervalSince1970: Double(k.hour)), a: k.app, v: k.version,
                o: k.os, n: counts[k]!.n, f: counts[k]!.fatal)
        }
        try await connection.query(
            """
            INSERT INTO group_hourly (project_id, group_id, hour, app_id, app_version, os, count, fatal_count)
            SELECT p, g, h, a, v, o, n, f FROM json_to_recordset(\(try Self.json(rows))::json)
                AS r(p bigint, g bigint, h timestamptz, a text, v text, o text, n bigint, f bigint)
            ON CONFLICT (project_id, hour, group_id, app_id, app_version, os) DO UPDATE SET
                count = group_hourly.count + EXCLUDED.count,
                fatal_count = group_hourly.fatal_count + EXCLUDED.fatal_count
            """, logger: logger)
        try await writeQueryRollups(stored, groups, connection)
        try await writeVersionRollups(stored, groups, connection)
    }
}
