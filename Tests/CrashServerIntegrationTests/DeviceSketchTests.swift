import CrashWire
import Foundation
import HummingbirdTesting
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The device sketches behind `devices` of large groups: the estimator, the stored form, the
/// SQL twin of the register function, and the query path against the real database.
@Suite struct DeviceSketchTests {
    @Test("estimates stay within 3 standard errors from 1 to 200,000 devices", arguments: [1, 7, 100, 900, 5_000, 60_000, 200_000])
    func estimateAccuracy(_ n: Int) {
        var sketch = DeviceSketch()
        for i in 0..<n { sketch.insert("install-\(i)") }
        let error = abs(Double(sketch.estimate - Int64(n))) / Double(n)
        // 3 standard errors: 1.04 / sqrt(1024) for HyperLogLog; small sets are near exact.
        if n <= 7 {
            #expect(sketch.estimate == Int64(n))
        } else {
            #expect(error <= 0.0975, "n=\(n) estimate=\(sketch.estimate)")
        }
    }

    @Test func storedFormRoundTripsAndMergesLikeTheUnion() {
        var a = DeviceSketch(), b = DeviceSketch(), union = DeviceSketch()
        for i in 0..<3_000 {
            a.insert("a\(i)")
            union.insert("a\(i)")
        }
        for i in 0..<500 {
            b.insert("b\(i)")
            union.insert("b\(i)")
        }
        #expect(DeviceSketch(encoded: a.encoded) == a)
        var merged = DeviceSketch(encoded: a.encoded)
        merged.merge(encoded: b.encoded)
        #expect(merged == union)
        // Stored forms concatenated (the query's string_agg) decode as their union, from a
        // ByteBuffer's view as from an array.
        #expect(DeviceSketch(encoded: b.encoded + a.encoded) == union)
        #expect(DeviceSketch(encoded: ByteBuffer(bytes: b.encoded + a.encoded).readableBytesView) == union)
        #expect(DeviceSketch(encoded: (b.encoded + a.encoded).lazy.map { $0 }) == union)
        // A device already counted changes nothing, so ingest writes nothing back.
        let register = DeviceSketch.register(for: "a1")
        #expect(DeviceSketch.merging(stored: a.encoded, updates: [register]) == nil)
        let fresh = DeviceSketch.merging(stored: [], updates: [register, DeviceSketch.register(for: "zz")])
        #expect(
            fresh.map { DeviceSketch(encoded: $0) }
                == {
                    var s = DeviceSketch()
                    s.insert("a1")
                    s.insert("zz")
                    return s
                }())
    }

    /// Ingest's merge of a batch's updates into a stored sketch, against the register-wise
    /// maximum: updates out of order, several for one register (the best one counts, wherever it
    /// stands), some below, at or above what is stored.
    @Test func mergingUpdatesKeepsTheHighestRankOfEachRegister() {
        var stored = DeviceSketch()
        for i in 0..<300 { stored.insert("stored-\(i)") }
        // Registers scattered over the whole range, each several times with different ranks.
        var updates: [(index: Int, rank: UInt8)] = []
        var encodedUpdates: [UInt8] = []
        for k in 0..<600 {
            let index = (k * 389) % 1024
            let rank = UInt8(1 + (k * 7) % 30)
            updates.append((index, rank))
            encodedUpdates += [UInt8(index >> 8), UInt8(index & 0xFF), rank]
        }
        var expected = stored
        expected.merge(encoded: encodedUpdates)
        let merged = DeviceSketch.merging(stored: stored.encoded, updates: updates)
        #expect(merged.map { DeviceSketch(encoded: $0) } == expected)
        // The stored form stays sorted by register, one entry each.
        #expect(merged == expected.encoded)
        // Updates no higher than what is stored change nothing.
        let lower: [(index: Int, rank: UInt8)] = updates.filter { expected.registers[$0.index] > 1 }.map { ($0.index, 1) }
        #expect(!lower.isEmpty)
        #expect(DeviceSketch.merging(stored: expected.encoded, updates: lower) == nil)
    }

    @Test func sqlRegisterFunctionMatchesSwift() async throws {
        let ids = (0..<500).map { "device-\($0)-\(UUID().uuidString)" } + ["", "é", "install-1"]
        let fromSQL = try await withTestDatabase { db in
            try await db.client.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT d, r.register, r.rank FROM unnest(\(ids)) AS d, crashguard_device_register(d) r",
                    logger: TestEnvironment.logger)
                var out: [String: (Int, Int)] = [:]
                for try await (id, register, rank) in rows.decode((String, Int, Int).self) { out[id] = (register, rank) }
                return out
            }
        }
        for id in ids {
            let swift = DeviceSketch.register(for: id)
            #expect(fromSQL[id]?.0 == swift.index && fromSQL[id]?.1 == Int(swift.rank), "\(id)")
        }
    }

    /// A window's edge days: whole day rows only where the rest of the day adds nothing or
    /// little (``TimeWindow/sketchPlan(now:notBefore:)``). 500 reports on 500 devices in a
    /// window from 20:00 three days ago to noon yesterday, with 200 more devices that evening
    /// and 200 that morning: neither edge day's row may count them. The default window, which
    /// ends now and reads today as its day row, counts them all and today's 300 devices too.
    @Test func edgeDaysCountOnlyTheWindowsDevicesAndTodaysDayRowItsReports() async throws {
        let p = try await makeProject()
        let start = utcMidnight(daysAgo: 3).addingTimeInterval(20 * TimeWindow.hour)
        let end = utcMidnight(daysAgo: 1).addingTimeInterval(12 * TimeWindow.hour)
        func spread(_ n: Int, from: Date, step: Double, device: String) -> [TestReport] {
            (0..<n).map { queryReport("edge", at: from.addingTimeInterval(Double($0) * step), device: "\(device)\($0)") }
        }
        let now = Date()
        let batch =
            spread(100, from: start.addingTimeInterval(TimeWindow.hour), step: 20, device: "head")
            + spread(300, from: utcMidnight(daysAgo: 2), step: 200, device: "in")
            + spread(100, from: utcMidnight(daysAgo: 1).addingTimeInterval(6 * TimeWindow.hour), step: 20, device: "tail")
            + spread(200, from: utcMidnight(daysAgo: 3).addingTimeInterval(5 * TimeWindow.hour), step: 10, device: "before")
            + spread(200, from: end.addingTimeInterval(6 * TimeWindow.hour), step: 10, device: "after")
            + spread(300, from: now.addingTimeInterval(-200), step: 0.5, device: "today")
        try await withApp { client in
            try await client.send(batch, key: p.ingestKey)
            let path = "/v1/projects/\(p.project)/crashes"
            let window = try await client.query(path + "?from=\(q(start))&to=\(q(end))", token: p.readToken)
            let edge = try #require(window.json.groups.titled("edge"))
            #expect(edge["count"] as? Int == 500)
            let devices = try #require(edge["devices"] as? Int)
            #expect(abs(devices - 500) <= 45, "estimate \(devices) for the window's 500 devices")
            let week = try #require(try await client.query(path, token: p.readToken).json.groups.titled("edge"))
            #expect(week["count"] as? Int == 1_200)
            let all = try #require(week["devices"] as? Int)
            #expect(abs(all - 1_200) <= 108, "estimate \(all) for 1,200 devices")
        }
    }

    /// 1,500 reports over 600 devices in one group (above the exact limit: estimated), a
    /// version filter (900 reports, 300 devices: still estimated), a rare version of the same
    /// group (30 reports on 10 devices: few, but an exact count would read all 1,530 reports of
    /// the group, so its version's sketch answers, near exact at that size), and a small group
    /// of 40 reports on 12 devices (exact).
    @Test func largeGroupsGetEstimatesSmallOnesExactCounts() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 2).addingTimeInterval(-5 * TimeWindow.hour)
        var reports: [TestReport] = []
        var perVersion = ["2.0.0": 0, "1.0.0": 0]
        for i in 0..<1_500 {
            let version = i % 5 < 3 ? "2.0.0" : "1.0.0"
            let k = perVersion[version]!
            perVersion[version] = k + 1
            let device = version == "2.0.0" ? "d\(k % 300)" : "d\(300 + k % 300)"
            reports.append(queryReport("big", at: base.addingTimeInterval(Double(i) * 97), version: version, device: device))
        }
        for i in 0..<30 {
            let at = base.addingTimeInterval(Double(i) * 97 + 13)
            reports.append(queryReport("big", at: at, version: "3.0.0", os: "Android", device: "rare\(i % 10)"))
        }
        for i in 0..<40 {
            reports.append(queryReport("small", at: base.addingTimeInterval(Double(i) * 600), device: "s\(i % 12)"))
        }
        let batch = reports
        try await withApp { client in
            try await client.send(batch, key: p.ingestKey)
            let path = "/v1/projects/\(p.project)/crashes"
            let all = try await client.query(path, token: p.readToken)
            let big = try #require(all.json.groups.titled("big"))
            #expect(big["count"] as? Int == 1_530)
            let devices = try #require(big["devices"] as? Int)
            #expect(abs(devices - 610) <= 42, "estimate \(devices) for 610 devices")
            #expect(all.json.groups.titled("small")?["devices"] as? Int == 12)
            let v2 = try await client.query(path + "?version=2.0.0", token: p.readToken)
            #expect(v2.json.groups.titled("big")?["count"] as? Int == 900)
            let v2devices = try #require(v2.json.groups.titled("big")?["devices"] as? Int)
            #expect(abs(v2devices - 300) <= 24, "estimate \(v2devices) for 300 devices")
            let rare = try await client.query(path + "?version=3.0.0", token: p.readToken)
            #expect(rare.json.groups.titled("big")?["count"] as? Int == 30)
            let rareDevices = try #require(rare.json.groups.titled("big")?["devices"] as? Int)
            #expect(abs(rareDevices - 10) <= 1, "estimate \(rareDevices) for 10 devices")
            // An os filter has no sketch: exact.
            let ios = try await client.query(path + "?os=iOS", token: p.readToken)
            #expect(ios.json.groups.titled("big")?["devices"] as? Int == 600)
        }
        // What ingest wrote (batch by batch, merged under the group lock) equals the
        // rollups recomputed from the stored reports by `crashguard_version_rollups` (which
        // `crash-bench seed` uses): counts and sketch bytes alike.
        let differences = try await withTestDatabase { db in
            try await db.aggregateRollups()
            return try await db.client.withConnection { connection in
                try await connection.query("SET TimeZone = 'UTC'", logger: TestEnvironment.logger)
                let rows = try await connection.query(
                    """
                    WITH derived AS (
                        SELECT * FROM crashguard_version_rollups((SELECT id FROM projects WHERE slug = \(p.project)), 'day')
                    ), written AS (
                        SELECT v.group_id, v.app_version, v.day, v.count, v.sketch FROM group_version_daily v
                        JOIN crash_groups g ON g.id = v.group_id WHERE g.project_id = (SELECT id FROM projects WHERE slug = \(p.project))
                    )
                    SELECT (SELECT count(*) FROM derived), (SELECT count(*) FROM (SELECT * FROM derived EXCEPT SELECT * FROM written) a)
                         + (SELECT count(*) FROM (SELECT * FROM written EXCEPT SELECT * FROM derived) b)
                    """, logger: TestEnvironment.logger)
                for try await (total, different) in rows.decode((Int64, Int64).self) { return (total, different) }
                return (Int64(0), Int64(-1))
            }
        }
        #expect(differences.0 > 0 && differences.1 == 0, "\(differences.0) derived rows, \(differences.1) differ")
    }
}
