import CrashWire
import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Adds newly stored reports to the hourly rollups that window queries read instead
    /// of raw reports. Runs inside the ingest transaction, so rollups and reports never
    /// disagree.
    func writeRollups(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        struct Key: Hashable, Comparable {
            var project: Int64, hour: Date, group: Int64, app: String, version: String, os: String
            static func < (a: Key, b: Key) -> Bool {
                (a.project, a.hour, a.group, a.app, a.version, a.os) < (b.project, b.hour, b.group, b.app, b.version, b.os)
            }
        }
        var counts: [Key: (n: Int64, fatal: Int64)] = [:]
        for item in stored {
            let hour = TimeWindow.floor(item.report.timestamp, TimeWindow.hour)
            let key = Key(
                project: item.projectID, hour: hour, group: groups[item.groupKey]!,
                app: item.report.app.id, version: item.report.app.version, os: item.report.device?.os ?? "")
            var c = counts[key, default: (0, 0)]
            c.n += 1
            if item.report.fatal == true { c.fatal += 1 }
            counts[key] = c
        }
        let keys = counts.keys.sorted()
        let n = keys.map { counts[$0]! }
        try await connection.query(
            """
            INSERT INTO group_hourly (project_id, group_id, hour, app_id, app_version, os, count, fatal_count)
            SELECT * FROM unnest(\(keys.map(\.project)), \(keys.map(\.group)), \(keys.map(\.hour)),
                                 \(keys.map(\.app)), \(keys.map(\.version)), \(keys.map(\.os)), \(n.map(\.n)), \(n.map(\.fatal)))
            ON CONFLICT (project_id, hour, group_id, app_id, app_version, os) DO UPDATE SET
                count = group_hourly.count + EXCLUDED.count,
                fatal_count = group_hourly.fatal_count + EXCLUDED.fatal_count
            """, logger: logger)
        try await writeQueryRollups(stored, groups, connection)
        try await writeVersionRollups(stored, groups, connection)
    }
}
