import CrashWire
import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The crash list under `environment=` (alone or with one version) reads the per-environment
/// rollups for whole days (`group_environment_daily`) and, without a version, for edge hours
/// (`group_environment_hours`; with one, `group_hourly`), and the devices of a large group
/// from its sketches and the edge hours' device ids, not from every raw report of the window
/// (docs/api.md, "Devices").
@Suite struct EnvironmentRollupTests {
    /// The filters' rollup: `environment=` with at most one version is the per-environment
    /// level; anything else the filters add keeps the dimension rollups.
    @Test func environmentFiltersReadThePerEnvironmentRollup() {
        #expect(GroupFilters(environments: ["staging"]).level == .environments)
        #expect(GroupFilters(version: "1.0", environments: ["staging", "dev"]).level == .environments)
        #expect(GroupFilters(os: "iOS", environments: ["staging"]).level == .dimensions)
        #expect(GroupFilters(app: "a", environments: ["staging"]).level == .dimensions)
        #expect(GroupFilters(version: "1.0").level == .versions)

        let window = TimeWindow(from: date("2026-10-30T06:00:00Z"), to: date("2026-11-29T00:00:00Z"))
        let reads = WindowCountReads(
            project: 1, members: [7, 8], window: window, filters: GroupFilters(environments: ["staging"]), pending: false,
            snapshot: nil)
        let query: PostgresQuery = "\(windowCountRows: reads)"
        #expect(query.sql.contains("group_environment_daily"), "\(query.sql)")
        #expect(!query.sql.contains("group_daily"), "whole days per environment, not per app, version and OS: \(query.sql)")
        #expect(query.sql.contains("group_environment_hours"), "the head's hours per environment: \(query.sql)")
        #expect(!query.sql.contains("group_hourly"), "\(query.sql)")
        // With a version, the head's hours come from the rows per version.
        let versioned: PostgresQuery =
            "\(windowCountRows: WindowCountReads(project: 1, members: [7, 8], window: window, filters: GroupFilters(version: "1.0", environments: ["staging"]), pending: false, snapshot: nil))"
        #expect(versioned.sql.contains("group_environment_daily") && versioned.sql.contains("group_hourly"), "\(versioned.sql)")
        #expect(!versioned.sql.contains("group_environment_hours"), "\(versioned.sql)")
    }

    /// A group with more reports in the window than the exact-count limit: under `environment=`
    /// (and with a version) its count is exact and its devices are the estimate of the sketch of
    /// its device ids in those environments and the window, whole days and edge hours alike.
    @Test func aLargeGroupsCountAndDevicesUnderEnvironmentComeFromTheRollup() async throws {
        let p = try await makeProject()
        let day = utcMidnight(daysAgo: 2)
        // 35 hours of reports every 3 minutes, from 3 hours before the window; the window starts at
        // 15:00 (its head's 9 hours are read as hours, past the 1/14 of the window that a whole day
        // may add) and ends at a midnight, a whole day later.
        let window = TimeWindow(from: day.addingTimeInterval(15 * 3600), to: day.addingTimeInterval(2 * 86_400))
        let reports = (0..<700).map { i in
            var object = queryReport(
                "EnvRollup big crash", at: day.addingTimeInterval(12 * 3600 + Double(i) * 180),
                version: i % 5 == 4 ? "1.0.0" : "2.0.0", device: i % 9 == 0 ? nil : "env-device-\(i % 211)"
            ).object
            object["environment"] = i % 4 == 3 ? "production" : "staging"
            return TestReport(object: object)
        }
        @Sendable func expected(_ version: String?) -> (count: Int, devices: Int64, exact: Int) {
            var sketch = DeviceSketch()
            var devices: Set<String> = []
            var count = 0
            for report in reports {
                let object = report.object
                let time = RFC3339.parse(object["timestamp"] as! String)!
                let app = object["app"] as! [String: Any]
                guard object["environment"] as? String == "staging", time >= window.from, time < window.to,
                    version == nil || app["version"] as? String == version
                else { continue }
                count += 1
                if let device = (object["device"] as? [String: Any])?["id"] as? String {
                    sketch.insert(device)
                    devices.insert(device)
                }
            }
            return (count, sketch.estimate, devices.count)
        }
        try await withApp { client in
            try await client.send(reports, key: p.ingestKey)
            let range = "from=\(q(window.from))&to=\(q(window.to))"
            for version in [nil, "2.0.0"] as [String?] {
                let want = expected(version)
                #expect(want.count > Int(PostgresQueryStore.Reader.exactDeviceLimit))
                // The estimate is not the exact count here: the old exact read would not pass.
                #expect(want.devices != Int64(want.exact), "\(want)")
                let filter = "environment=staging" + (version.map { "&version=\($0)" } ?? "")
                let list = try await client.query("/v1/projects/\(p.project)/crashes?\(range)&\(filter)", token: p.readToken)
                let group = try #require(list.json.groups.first)
                #expect(group["count"] as? Int == want.count, "\(filter)")
                #expect((group["devices"] as? Int).map(Int64.init) == want.devices, "\(filter)")
            }
        }
    }

    private func date(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
}
