import CrashWire
import Foundation
import NIOCore
import PostgresNIO

extension RollupFold {
    /// One row of `group_version_hourly` / `group_version_daily` (``environment`` is
    /// ``allEnvironments``) or of `group_environment_daily` (an environment, and `daily`): a
    /// group, a version (`""` for all versions; a ``BatchText`` rank), and the start of an hour
    /// or a UTC day.
    struct VersionRollupKey: Hashable, Comparable {
        var group: Int64
        var version: Int32
        var environment: Int32 = VersionRollupKey.allEnvironments
        var daily: Bool
        var bucket: Date

        /// The ``environment`` of the per-version tables' rows, which hold every environment.
        static let allEnvironments: Int32 = -1

        /// The table the row is in: 0 `group_version_hourly`, 1 `group_version_daily`, 2 `group_environment_daily`.
        var table: Int { environment != Self.allEnvironments ? 2 : daily ? 1 : 0 }

        static func < (a: VersionRollupKey, b: VersionRollupKey) -> Bool {
            (a.group, a.environment, a.version, a.daily ? 1 : 0, a.bucket) < (b.group, b.environment, b.version, b.daily ? 1 : 0, b.bucket)
        }
    }

    /// One row that reports add to `group_version_hourly`, `group_version_daily` or
    /// `group_environment_daily`: a count, and the merged sketch (empty when no register grew:
    /// the stored one is kept).
    struct VersionRollupRow {
        var key: VersionRollupKey
        var count: Int64
        var sketch: ByteBuffer
    }

    /// The rows of the three sketch tables, each sorted by key.
    struct SketchRollupRows {
        var hourly: [VersionRollupRow] = []
        var daily: [VersionRollupRow] = []
        var environmentDaily: [VersionRollupRow] = []
    }

    /// The rows that reports add to `group_version_hourly` and `group_version_daily`, for all
    /// versions and per version, and to `group_environment_daily`, per environment for all
    /// versions and per version: report counts, and device ids into the sketches. Written by
    /// ``fold(_:_:)``.
    ///
    /// Runs in a transaction that holds the aggregator's lock (``PostgresRollupStore/lockID``),
    /// which every writer of these rows takes, so no other writer changes them until commit:
    /// sketches are read here, merged, and sent back only when a register grew (an empty sketch
    /// in the statement keeps the stored one).
    func versionRollupRows(
        _ facts: [RollupFactTable.Report], _ text: BatchText, _ connection: PostgresConnection
    ) async throws -> SketchRollupRows {
        // One entry per key, made (or found) and changed in place: one hash per key and report.
        var entries: [VersionRollupKey: (n: Int64, registers: [(index: Int, rank: UInt8)])] = [:]
        entries.reserveCapacity(facts.count)
        let all = text.all
        for (fact, ranks) in zip(facts, text.reports) {
            let (group, register) = (fact.group, fact.deviceRegister)
            let hour = TimeWindow.floor(fact.time, TimeWindow.hour)
            let day = TimeWindow.floor(fact.time, TimeWindow.day)
            func count(_ version: Int32, _ environment: Int32 = VersionRollupKey.allEnvironments, daily: Bool, _ bucket: Date) {
                let key = VersionRollupKey(group: group, version: version, environment: environment, daily: daily, bucket: bucket)
                Self.count(&entries[key, default: (0, [])], register)
            }
            count(all, daily: false, hour)
            count(all, daily: true, day)
            count(ranks.version, daily: false, hour)
            count(ranks.version, daily: true, day)
            count(all, ranks.environment, daily: true, day)
            count(ranks.version, ranks.environment, daily: true, day)
        }
        let sorted = entries.sorted { $0.key < $1.key }
        // The stored sketch of each key with devices, read by its place in the statement's arrays.
        let withDevices = sorted.indices.filter { !sorted[$0].value.registers.isEmpty }
        let keys = (0..<3).map { table in withDevices.filter { sorted[$0].key.table == table } }
        var current = [ByteBuffer?](repeating: nil, count: sorted.count)
        if !keys[0].isEmpty || !keys[1].isEmpty {
            let rows = try await connection.run(
                RollupSQL.ReadSketches.self, (keys[0].map { sorted[$0].key }, keys[1].map { sorted[$0].key }, text), logger: logger)
            for try await row in rows {
                let (isDaily, ordinal, sketch) = try row.decode((Bool, Int64, ByteBuffer).self)
                current[keys[isDaily ? 1 : 0][Int(ordinal) - 1]] = sketch
            }
        }
        if !keys[2].isEmpty {
            let rows = try await connection.run(
                RollupSQL.ReadEnvironmentSketches.self, (keys[2].map { sorted[$0].key }, text), logger: logger)
            for try await (ordinal, sketch) in rows.decode((Int64, ByteBuffer).self) { current[keys[2][Int(ordinal) - 1]] = sketch }
        }
        let empty = ByteBuffer()
        var out = SketchRollupRows()
        for (index, (key, entry)) in sorted.enumerated() {
            var sketch = empty
            if !entry.registers.isEmpty {
                let stored = current[index].map { Array($0.readableBytesView) } ?? []
                sketch = DeviceSketch.merging(stored: stored, updates: entry.registers).map { ByteBuffer(bytes: $0) } ?? empty
            }
            let row = VersionRollupRow(key: key, count: entry.n, sketch: sketch)
            switch key.table {
            case 0: out.hourly.append(row)
            case 1: out.daily.append(row)
            default: out.environmentDaily.append(row)
            }
        }
        return out
    }

    private static func count(_ entry: inout (n: Int64, registers: [(index: Int, rank: UInt8)]), _ register: (index: Int, rank: UInt8)?) {
        entry.n += 1
        if let register { entry.registers.append(register) }
    }

}

extension RollupSQL {
    /// The stored sketches of the given keys: rows of (daily, the key's place in its array from
    /// 1, sketch). Keys are sent as arrays and found by their place, so a row decodes no text or
    /// time.
    ///
    /// Each key is a probe of its table's primary key (a `LATERAL` subquery with `LIMIT 1`,
    /// which the planner keeps as a loop over the keys). The aggregator's connections come from
    /// the main pool, whose sessions switch a prepared statement to its generic plan after five
    /// runs when that plan looks cheaper: a join of the keys to the table, planned with the
    /// statistics of that moment, is on a fresh database a hash join over a scan of the whole
    /// table, and stays so until the next `ANALYZE` (IngestPlanTests).
    enum ReadSketches: FixedStatement {
        static func query(
            _ keys: (hourly: [RollupFold.VersionRollupKey], daily: [RollupFold.VersionRollupKey], text: BatchText)
        ) -> PostgresQuery {
            "\(sketches: keys.hourly, daily: false, keys.text) UNION ALL \(sketches: keys.daily, daily: true, keys.text)"
        }
        static let sql = query(([], [], BatchText([]))).sql
    }

    /// The stored sketches of the given `group_environment_daily` keys: rows of (the key's place
    /// in the array from 1, sketch), each key a probe of the primary key, as ``ReadSketches``.
    enum ReadEnvironmentSketches: FixedStatement {
        static func query(_ keys: (keys: [RollupFold.VersionRollupKey], text: BatchText)) -> PostgresQuery {
            "\(environmentSketches: keys.keys, keys.text)"
        }
        static let sql = query(([], BatchText([]))).sql
    }
}

extension PostgresQuery.StringInterpolation {
    /// One half of ``RollupSQL/ReadSketches``: the sketches of `keys` in `group_version_daily`
    /// or `group_version_hourly`, each key a probe of the table's primary key.
    fileprivate mutating func appendInterpolation(sketches keys: [RollupFold.VersionRollupKey], daily: Bool, _ text: BatchText) {
        let (table, bucket) = daily ? ("group_version_daily", "day") : ("group_version_hourly", "hour")
        appendLiteral("SELECT \(daily), k.i, s.sketch FROM unnest(")
        appendInterpolation(keys.map(\.group))
        appendLiteral(", ")
        appendInterpolation(keys.map { text[$0.version] })
        appendLiteral(", ")
        appendInterpolation(keys.map(\.bucket))
        appendLiteral(
            """
            ) WITH ORDINALITY AS k(g, v, t, i) CROSS JOIN LATERAL (
                SELECT sketch FROM \(table) WHERE group_id = k.g AND app_version = k.v AND \(bucket) = k.t LIMIT 1
            ) s
            """)
    }

    /// ``RollupSQL/ReadEnvironmentSketches``: the sketches of `keys` in `group_environment_daily`.
    fileprivate mutating func appendInterpolation(environmentSketches keys: [RollupFold.VersionRollupKey], _ text: BatchText) {
        appendLiteral("SELECT k.i, s.sketch FROM unnest(")
        appendInterpolation(keys.map(\.group))
        appendLiteral(", ")
        appendInterpolation(keys.map { text[$0.environment] })
        appendLiteral(", ")
        appendInterpolation(keys.map { text[$0.version] })
        appendLiteral(", ")
        appendInterpolation(keys.map(\.bucket))
        appendLiteral(
            """
            ) WITH ORDINALITY AS k(g, e, v, t, i) CROSS JOIN LATERAL (
                SELECT sketch FROM group_environment_daily WHERE group_id = k.g AND environment = k.e AND app_version = k.v AND day = k.t LIMIT 1
            ) s
            """)
    }
}
