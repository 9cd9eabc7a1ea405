import CrashWire
import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The list's daily `trend` reads whole days from the daily rollups and only the edge hours
/// and sub-hour edges from the hourly rollups and raw reports: every piece of a window with
/// ragged edges must land in the right day, with and without report filters, `environment=`
/// among them (alone, from the per-environment rollups; with a version, from `group_hourly`).
@Suite struct TrendRollupTests {
    @Test func dailyTrendAddsDaysEdgeHoursAndRawEdges() async throws {
        let p = try await makeProject()
        let base = utcMidnight(daysAgo: 3)
        let h = TimeWindow.hour
        let m = 60.0
        // Window [base - 2h30m, base + 53h20m): a raw edge, an edge hour, two whole days,
        // an edge hour and a raw edge; four daily buckets starting at base - 1 day.
        let from = base.addingTimeInterval(-2 * h - 30 * m)
        let to = base.addingTimeInterval(53 * h + 20 * m)
        let sent = [
            queryReport("t", at: base.addingTimeInterval(-3 * h), os: "iOS"),  // before the window
            queryReport("t", at: base.addingTimeInterval(-2 * h - 10 * m), os: "iOS"),  // raw edge, day -1
            queryReport("t", at: base.addingTimeInterval(-1 * h + 5 * m), version: "2.0", os: "iOS"),  // edge hour, day -1
            queryReport("t", at: base.addingTimeInterval(3 * h), os: "Android"),  // whole day 0
            queryReport("t", at: base.addingTimeInterval(30 * h), version: "2.0", os: "iOS"),  // whole day 1
            queryReport("t", at: base.addingTimeInterval(30 * h + 1 * m), os: "iOS"),  // whole day 1
            queryReport("t", at: base.addingTimeInterval(50 * h), os: "iOS"),  // edge hour, day 2
            queryReport("t", at: base.addingTimeInterval(53 * h + 10 * m), version: "2.0", os: "Android"),  // raw edge, day 2
            queryReport("t", at: base.addingTimeInterval(53 * h + 25 * m), os: "iOS"),  // after the window
        ]
        let reports = sent.enumerated().map { i, report in
            var object = report.object
            object["environment"] = [2, 3, 6, 7].contains(i) ? "staging" : "production"
            return TestReport(object: object)
        }
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let window = "from=\(q(from))&to=\(q(to))"
            func trend(_ unit: String, _ filter: String) async throws -> [Int] {
                let list = try await client.query(
                    "/v1/projects/\(p.project)/crashes?\(window)&trend=\(unit)\(filter)", token: p.readToken)
                #expect(list.status == .ok)
                let points = try #require(list.json.groups.titled("t")?["trend"] as? [[String: Any]])
                return points.map { $0["count"] as? Int ?? -1 }
            }
            let expected: [(String, [Int])] = [
                ("", [2, 1, 2, 2]), ("&os=iOS", [2, 0, 2, 1]), ("&os=Android", [0, 1, 0, 1]),
                ("&version=2.0", [1, 0, 1, 1]), ("&version=1.0.0&os=iOS", [1, 0, 1, 1]),
                ("&environment=staging", [1, 1, 0, 2]), ("&environment=production", [1, 0, 2, 0]),
                ("&environment=staging&environment=production", [2, 1, 2, 2]), ("&environment=staging&version=2.0", [1, 0, 0, 1]),
            ]
            for (filter, counts) in expected {
                #expect(try await trend("day", filter) == counts, "trend=day\(filter)")
                // The hourly trend, summed per UTC day, agrees with the daily one.
                let hourly = try await trend("hour", filter)
                #expect(hourly.count == 24 * 4 - 21 - 18, "hour buckets of \(filter)")
                let first = Calendar.utc.component(.hour, from: TimeWindow.floor(from, h))
                var perDay = [0, 0, 0, 0]
                for (i, n) in hourly.enumerated() { perDay[(first + i) / 24] += n }
                #expect(perDay == counts, "trend=hour\(filter) per day")
            }
            let days = try await client.query(
                "/v1/projects/\(p.project)/crashes?\(window)&trend=day", token: p.readToken)
            let t = (days.json.groups.titled("t")?["trend"] as? [[String: Any]])?.map { $0["t"] as? String }
            #expect(t == (-1...2).map { RFC3339.format(base.addingTimeInterval(Double($0) * TimeWindow.day)) })
        }
    }
}

extension Calendar {
    fileprivate static let utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()
}
