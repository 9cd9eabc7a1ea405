import CrashWire
import Foundation
import HTTPTypes
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The crash detail's `models` breakdown reads whole days' counts and edge days' hours of
/// `group_environment_model_daily` (schema.sql), summing its environments or those asked: every
/// window, whole days, edge hours, sub-hour edges, a window inside one day or across one
/// midnight, counts exactly the reports in it, of every environment or of one.
@Suite struct ModelBreakdownTests {
    @Test func modelsCountExactlyTheReportsOfEveryWindow() async throws {
        let p = try await makeProject()
        let first = utcMidnight(daysAgo: 3)
        var reports: [TestReport] = []
        var times: [(Date, String, String)] = []
        for day in 0..<3 {
            for hour in [0, 4, 5, 12, 19, 20, 23] {
                for minute in [10, 40] {
                    let time = first.addingTimeInterval(Double(day) * TimeWindow.day + Double(hour) * 3600 + Double(minute) * 60)
                    let model = ["m1", "m2", "m3", "m1", "m4"][(hour + day + minute / 40) % 5]
                    let environment = (hour + minute) % 3 == 0 ? "staging" : "production"
                    times.append((time, model, environment))
                    var object = queryReport("models", at: time, model: model).object
                    object["environment"] = environment
                    reports.append(TestReport(object: object))
                }
            }
        }
        let (sent, stamps) = (reports, times)
        let (d0, d1, d2) = (first, first.addingTimeInterval(TimeWindow.day), first.addingTimeInterval(2 * TimeWindow.day))
        let windows: [(Date, Date)] = [
            (d0.addingTimeInterval(5 * 3600), d2.addingTimeInterval(20 * 3600)),  // edge hours at both ends, one whole day
            (d0.addingTimeInterval(5 * 3600 + 1800), d2.addingTimeInterval(20 * 3600 + 900)),  // and sub-hour edges
            (d1.addingTimeInterval(3 * 3600), d1.addingTimeInterval(13 * 3600)),  // inside one day
            (d0.addingTimeInterval(22 * 3600), d1.addingTimeInterval(5 * 3600)),  // across one midnight, no whole day
            (d0, d2),  // whole days only
            (d0.addingTimeInterval(23 * 3600), d2.addingTimeInterval(3600)),  // one hour at each end
        ]
        try await withApp { client in
            try await client.send(sent, key: p.ingestKey)
            let list = try await client.query("/v1/projects/\(p.project)/crashes", token: p.readToken)
            let id = try #require(list.json.groups.first?["id"] as? String)
            for (from, to) in windows {
                for environment in [nil, "staging", "production"] {
                    var counts: [String: Int] = [:]
                    for (time, model, env) in stamps where time >= from && time < to && (environment == nil || env == environment) {
                        counts[model, default: 0] += 1
                    }
                    let expected = counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    let filter = environment.map { "&environment=\($0)" } ?? ""
                    let detail = try await client.query(
                        "/v1/projects/\(p.project)/crashes/\(id)?from=\(q(from))&to=\(q(to))\(filter)", token: p.readToken)
                    #expect(detail.status == .ok)
                    let breakdown = try #require(detail.json["breakdown"] as? [String: [[String: Any]]])
                    let models = breakdown["models"]?.map { "\($0["value"]!)=\($0["count"]!)" }
                    #expect(models == expected, "\(RFC3339.format(from)) to \(RFC3339.format(to)) \(environment ?? "every environment")")
                }
            }
        }
    }
}
