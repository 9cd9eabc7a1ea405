import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension CrashDatabase {
    /// One row of `group_version_hourly` / `group_version_daily`: a group, a version (`""`
    /// for all versions; a ``BatchText`` rank), and the start of an hour or a UTC day.
    struct VersionRollupKey: Hashable, Comparable {
        var group: Int64
        var version: Int32
        var daily: Bool
        var bucket: Date

        static func < (a: VersionRollupKey, b: VersionRollupKey) -> Bool {
            (a.group, a.version, a.daily ? 1 : 0, a.bucket) < (b.group, b.version, b.daily ? 1 : 0, b.bucket)
        }
    }

    /// One row that newly stored reports add to `group_version_hourly` or `group_version_daily`:
    /// a count, and the merged sketch (empty when no register grew: the stored one is kept).
    struct VersionRollupRow {
        var key: VersionRollupKey
        var n: Int64
        var sketch: ByteBuffer
    }

    /// The rows that newly stored reports add to `group_version_hourly` and
    /// `group_version_daily`, for all versions and per version: report counts, and device ids
    /// into the sketches. Written by ``writeReportsAndRollups(_:_:regressed:_:)``.
    ///
    /// Runs in the ingest transaction after ``ClaimAndCount`` has locked every group of the
    /// batch (`FOR UPDATE`), so no other writer changes these rows until commit: sketches
    /// are read here (a statement of its own, after the lock, so it sees the last committed
    /// ones), merged, and sent back only when a register grew (an empty sketch in the
    /// statement keeps the stored one).
    func versionRollupRows(
        _ stored: [IngestItem], _ groupIDs: [Int64], _ text: BatchText, _ connection: PostgresConnection
    ) async throws -> (hourly: [VersionRollupRow], daily: [VersionRollupRow]) {
        var counts: [VersionRollupKey: Int64] = [:]
        var registers: [VersionRollupKey: [(index: Int, rank: UInt8)]] = [:]
        let all = text.all
        for ((item, group), ranks) in zip(zip(stored, groupIDs), text.reports) {
            let register = item.report.device?.id.flatMap { $0.isEmpty ? nil : DeviceSketch.register(for: $0) }
            let hour = TimeWindow.floor(item.report.timestamp, TimeWindow.hour)
            let day = TimeWindow.floor(item.report.timestamp, TimeWindow.day)
            for version in [all, ranks.version] {
                for key in [
                    VersionRollupKey(group: group, version: version, daily: false, bucket: hour),
                    VersionRollupKey(group: group, version: version, daily: true, bucket: day),
                ] {
                    counts[key, default: 0] += 1
                    if let register { registers[key, default: []].append(register) }
                }
            }
        }
        var current: [VersionRollupKey: ByteBuffer] = [:]
        if !registers.isEmpty {
            let keys = registers.keys.sorted()
            let rows = try await connection.run(
                ReadSketches.self, (keys.filter { !$0.daily }, keys.filter(\.daily), text), logger: logger)
            for try await row in rows {
                let (group, version, isDaily, bucket, sketch) = try row.decode((Int64, String, Bool, Date, ByteBuffer).self)
                // Every row read is one of the batch's keys, so its version is one of the batch's.
                guard let version = text.rank(of: version) else { continue }
                current[VersionRollupKey(group: group, version: version, daily: isDaily, bucket: bucket)] = sketch
            }
        }
        let empty = ByteBuffer()
        let rows = counts.keys.sorted().map { key -> VersionRollupRow in
            guard let updates = registers[key] else { return VersionRollupRow(key: key, n: counts[key]!, sketch: empty) }
            let stored = current[key].map { Array($0.readableBytesView) } ?? []
            let merged = DeviceSketch.merging(stored: stored, updates: updates).map { ByteBuffer(bytes: $0) } ?? empty
            return VersionRollupRow(key: key, n: counts[key]!, sketch: merged)
        }
        return (rows.filter { !$0.key.daily }, rows.filter(\.key.daily))
    }
    enum ReadSketches: FixedStatement {
        static func query(_ keys: (hourly: [VersionRollupKey], daily: [VersionRollupKey], text: BatchText)) -> PostgresQuery {
            let text = keys.text
            return """
                SELECT s.group_id, s.app_version, false, s.hour, s.sketch FROM group_version_hourly s
                JOIN unnest(\(keys.hourly.map(\.group)), \(keys.hourly.map { text[$0.version] }), \(keys.hourly.map(\.bucket)))
                    AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.hour = k.t
                UNION ALL
                SELECT s.group_id, s.app_version, true, s.day, s.sketch FROM group_version_daily s
                JOIN unnest(\(keys.daily.map(\.group)), \(keys.daily.map { text[$0.version] }), \(keys.daily.map(\.bucket)))
                    AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.day = k.t
                """
        }
        static let sql = query(([], [], BatchText([]))).sql
    }
}
