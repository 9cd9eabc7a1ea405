import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension CrashDatabase {
    /// One device sketch row: a group, a version (`""` for all versions), and an hour or a
    /// day (seconds since 1970).
    struct SketchKey: Hashable, Comparable {
        var group: Int64
        var version: String
        var daily: Bool
        var bucket: Int64

        static func < (a: SketchKey, b: SketchKey) -> Bool {
            (a.group, a.version, a.daily ? 1 : 0, a.bucket) < (b.group, b.version, b.daily ? 1 : 0, b.bucket)
        }
    }

    /// Adds the device ids of newly stored reports to their groups' device sketches
    /// (`group_devices_hourly`, `group_devices_daily`; all versions and per version).
    ///
    /// Runs in the ingest transaction after ``updateGroups`` has locked every group of the
    /// batch (`FOR UPDATE`), so no other writer can change these sketches until commit:
    /// they are read, merged here, and only those that changed are written back.
    func writeDeviceSketches(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        var updates: [SketchKey: [(index: Int, rank: UInt8)]] = [:]
        for item in stored {
            guard let device = item.report.device?.id, !device.isEmpty else { continue }
            let register = DeviceSketch.register(for: device)
            let seconds = Int64(item.report.timestamp.timeIntervalSince1970.rounded(.down))
            let hour = seconds - ((seconds % 3600) + 3600) % 3600
            let day = seconds - ((seconds % 86_400) + 86_400) % 86_400
            let group = groups[item.groupKey]!
            for version in ["", item.report.app.version] {
                updates[SketchKey(group: group, version: version, daily: false, bucket: hour), default: []].append(register)
                updates[SketchKey(group: group, version: version, daily: true, bucket: day), default: []].append(register)
            }
        }
        if updates.isEmpty { return }
        let keys = updates.keys.sorted()
        let hourly = keys.filter { !$0.daily }, daily = keys.filter(\.daily)
        func date(_ s: Int64) -> Date { Date(timeIntervalSince1970: Double(s)) }
        let rows = try await connection.query(
            """
            SELECT s.group_id, s.app_version, false, s.hour, s.sketch FROM group_devices_hourly s
            JOIN unnest(\(hourly.map(\.group)), \(hourly.map(\.version)), \(hourly.map { date($0.bucket) }))
                AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.hour = k.t
            UNION ALL
            SELECT s.group_id, s.app_version, true, s.day, s.sketch FROM group_devices_daily s
            JOIN unnest(\(daily.map(\.group)), \(daily.map(\.version)), \(daily.map { date($0.bucket) }))
                AS k(g, v, t) ON s.group_id = k.g AND s.app_version = k.v AND s.day = k.t
            """, logger: logger)
        var current: [SketchKey: ByteBuffer] = [:]
        for try await (group, version, isDaily, bucket, sketch) in rows.decode((Int64, String, Bool, Date, ByteBuffer).self) {
            let key = SketchKey(group: group, version: version, daily: isDaily, bucket: Int64(bucket.timeIntervalSince1970))
            current[key] = sketch
        }
        var changed: [(key: SketchKey, sketch: ByteBuffer)] = []
        for key in keys {
            let stored = current[key].map { Array($0.readableBytesView) } ?? []
            if let merged = Self.mergeSparse(stored, updates[key]!) {
                changed.append((key, ByteBuffer(bytes: merged)))
            }
        }
        let h = changed.filter { !$0.key.daily }, d = changed.filter(\.key.daily)
        if !h.isEmpty {
            try await connection.query(
                """
                INSERT INTO group_devices_hourly AS t (group_id, app_version, hour, sketch)
                SELECT * FROM unnest(\(h.map(\.key.group)), \(h.map(\.key.version)), \(h.map { date($0.key.bucket) }), \(h.map(\.sketch)))
                ON CONFLICT (group_id, app_version, hour) DO UPDATE SET sketch = EXCLUDED.sketch
                """, logger: logger)
        }
        if !d.isEmpty {
            try await connection.query(
                """
                INSERT INTO group_devices_daily AS t (group_id, app_version, day, sketch)
                SELECT * FROM unnest(\(d.map(\.key.group)), \(d.map(\.key.version)), \(d.map { date($0.key.bucket) }), \(d.map(\.sketch)))
                ON CONFLICT (group_id, app_version, day) DO UPDATE SET sketch = EXCLUDED.sketch
                """, logger: logger)
        }
    }

    /// Merges register updates into a sketch in stored form (sorted 3-byte entries); nil
    /// when no register grows.
    static func mergeSparse(_ stored: [UInt8], _ updates: [(index: Int, rank: UInt8)]) -> [UInt8]? {
        var best: [Int: UInt8] = [:]
        for u in updates where best[u.index, default: 0] < u.rank { best[u.index] = u.rank }
        let sorted = best.sorted { $0.key < $1.key }
        var out: [UInt8] = []
        out.reserveCapacity(stored.count + sorted.count * 3)
        var grew = false
        var i = 0
        func append(_ index: Int, _ rank: UInt8) {
            out.append(UInt8(index >> 8))
            out.append(UInt8(index & 0xFF))
            out.append(rank)
        }
        for (index, rank) in sorted {
            while i + 2 < stored.count, Int(stored[i]) << 8 | Int(stored[i + 1]) < index {
                out.append(contentsOf: stored[i..<i + 3])
                i += 3
            }
            if i + 2 < stored.count, Int(stored[i]) << 8 | Int(stored[i + 1]) == index {
                if stored[i + 2] < rank { grew = true }
                append(index, max(stored[i + 2], rank))
                i += 3
            } else {
                grew = true
                append(index, rank)
            }
        }
        while i + 2 < stored.count {
            out.append(contentsOf: stored[i..<i + 3])
            i += 3
        }
        return grew ? out : nil
    }
}
