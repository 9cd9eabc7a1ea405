import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension CrashDatabase {
    /// One row of `group_version_hourly` / `group_version_daily`: a group, a version (`""`
    /// for all versions), and the start of an hour or a UTC day.
    struct VersionRollupKey: Hashable, Comparable {
        var group: Int64
        var version: String
        var daily: Bool
        var bucket: Date

        static func < (a: VersionRollupKey, b: VersionRollupKey) -> Bool {
            (a.group, a.version, a.daily ? 1 : 0, a.bucket) < (b.group, b.version, b.daily ? 1 : 0, b.bucket)
        }
    }

    /// Adds newly stored reports to `group_version_hourly` and `group_version_daily`, for
    /// all versions and per version: report counts, and device ids into the sketches.
    ///
    /// Runs in the ingest transaction after ``updateGroups`` has locked every group of the
    /// batch (`FOR UPDATE`), so no other writer changes these rows until commit: sketches
    /// are read, merged here, and sent back only when a register grew (an empty sketch in
    /// the statement keeps the stored one).
    func writeVersionRollups(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        var counts: [VersionRollupKey: Int64] = [:]
        var registers: [VersionRollupKey: [(index: Int, rank: UInt8)]] = [:]
        for item in stored {
            let register = item.report.device?.id.flatMap { $0.isEmpty ? nil : DeviceSketch.register(for: $0) }
            let hour = TimeWindow.floor(item.report.timestamp, TimeWindow.hour)
            let day = TimeWindow.floor(item.report.timestamp, TimeWindow.day)
            let group = groups[item.groupKey]!
            for version in ["", item.report.app.version] {
                for key in [
                    VersionRollupKey(group: group, version: version, daily: false, bucket: hour),
                    VersionRollupKey(group: group, version: version, daily: true, bucket: day),
                ] {
                    counts[key, default: 0] += 1
                    if let register { registers[key, default: []].append(register) }
                }
            }
        }
        if counts.isEmpty { return }
        var current: [VersionRollupKey: ByteBuffer] = [:]
        if !registers.isEmpty {
            let keys = registers.keys.sorted()
            let hourly = keys.filter { !$0.daily }, daily = keys.filter(\.daily)
            let rows = try await connection.query(
                """
                SELECT s.group_id, s.app_version, false, s.hour, s.sketch FROM group_version_hourly s
                JOIN unnest(\(hourly.map(\.group)), \(hourly.map(\.version)), \(hourly.map(\.bucket)))
                    AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.hour = k.t
                UNION ALL
                SELECT s.group_id, s.app_version, true, s.day, s.sketch FROM group_version_daily s
                JOIN unnest(\(daily.map(\.group)), \(daily.map(\.version)), \(daily.map(\.bucket)))
                    AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.day = k.t
                """, logger: logger)
            for try await (group, version, isDaily, bucket, sketch) in rows.decode((Int64, String, Bool, Date, ByteBuffer).self) {
                current[VersionRollupKey(group: group, version: version, daily: isDaily, bucket: bucket)] = sketch
            }
        }
        let empty = ByteBuffer()
        let rows = counts.keys.sorted().map { key -> (key: VersionRollupKey, n: Int64, sketch: ByteBuffer) in
            guard let updates = registers[key] else { return (key, counts[key]!, empty) }
            let stored = current[key].map { Array($0.readableBytesView) } ?? []
            return (key, counts[key]!, DeviceSketch.merging(stored: stored, updates: updates).map { ByteBuffer(bytes: $0) } ?? empty)
        }
        let h = rows.filter { !$0.key.daily }, d = rows.filter(\.key.daily)
        try await connection.query(
            """
            WITH hourly AS (
                INSERT INTO group_version_hourly AS t (group_id, app_version, hour, count, sketch)
                SELECT * FROM unnest(\(h.map(\.key.group)), \(h.map(\.key.version)), \(h.map(\.key.bucket)),
                                     \(h.map(\.n)), \(h.map(\.sketch)))
                ON CONFLICT (group_id, app_version, hour) DO UPDATE SET count = t.count + EXCLUDED.count,
                    sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
            )
            INSERT INTO group_version_daily AS t (group_id, app_version, day, count, sketch)
            SELECT * FROM unnest(\(d.map(\.key.group)), \(d.map(\.key.version)), \(d.map(\.key.bucket)),
                                 \(d.map(\.n)), \(d.map(\.sketch)))
            ON CONFLICT (group_id, app_version, day) DO UPDATE SET count = t.count + EXCLUDED.count,
                sketch = CASE WHEN length(EXCLUDED.sketch) = 0 THEN t.sketch ELSE EXCLUDED.sketch END
            """, logger: logger)
    }
}
