import CrashWire
import Foundation
import NIOCore

extension RollupFold {
    // Text fields (app, version, os, facet, value, model, kind) are ``BatchText`` ranks, which
    // sort as their strings do.

    /// A `group_daily` row: a group's reports of one UTC day per app, version, os and environment.
    struct DayKey: Hashable {
        var project: Int64, group: Int64, day: Date, app: Int32, version: Int32, os: Int32, environment: Int32
    }
    /// A `group_facets` row: a group's reports with one value of a facet (app, version, os or environment).
    struct FacetKey: Hashable { var project: Int64, group: Int64, facet: Int32, value: Int32 }
    /// A `group_environment_model_daily` row: a group's reports of one environment and UTC day
    /// from one device model.
    struct ModelKey: Hashable { var group: Int64, environment: Int32, day: Date, model: Int32 }
    /// A `project_hourly` row: a project's reports of one hour of one kind, version and environment.
    struct ProjectKey: Hashable { var project: Int64, hour: Date, kind: Int32, version: Int32, environment: Int32 }

    /// The rows that reports add to the rollups the query API reads (see schema.sql):
    /// `group_daily`, `group_facets` (app, version, os, environment),
    /// `group_environment_model_daily` and `project_hourly`, each sorted by its key. Written by
    /// ``fold(_:_:)``.
    struct QueryRollupRows {
        var days: [(key: DayKey, value: Int64)]
        var facets: [(key: FacetKey, value: (n: Int64, first: Date, last: Date))]
        var models: [(key: ModelKey, value: ModelHours)]
        var projects: [(key: ProjectKey, value: Int64)]

        static let empty = QueryRollupRows(days: [], facets: [], models: [], projects: [])
    }

    static func queryRollupRows(_ facts: [RollupFactTable.Report], _ text: BatchText) -> QueryRollupRows {
        var days: [DayKey: Int64] = [:]
        var facets: [FacetKey: (n: Int64, first: Date, last: Date)] = [:]
        var models: [ModelKey: ModelHours] = [:]
        var projects: [ProjectKey: Int64] = [:]
        let (appFacet, versionFacet, osFacet, environmentFacet) = (text.appFacet, text.versionFacet, text.osFacet, text.environmentFacet)
        for (fact, ranks) in zip(facts, text.reports) {
            let (group, time) = (fact.group, fact.time)
            let hour = TimeWindow.floor(time, TimeWindow.hour)
            let day = TimeWindow.floor(time, TimeWindow.day)
            let dayKey = DayKey(
                project: fact.project, group: group, day: day, app: ranks.app, version: ranks.version, os: ranks.os,
                environment: ranks.environment)
            days[dayKey, default: 0] += 1
            // One hash per facet: the entry is made (or found) and changed in place.
            func count(_ facet: Int32, _ value: Int32) {
                Self.count(&facets[FacetKey(project: fact.project, group: group, facet: facet, value: value), default: (0, time, time)], at: time)
            }
            count(appFacet, ranks.app)
            count(versionFacet, ranks.version)
            count(osFacet, ranks.os)
            count(environmentFacet, ranks.environment)
            models[ModelKey(group: group, environment: ranks.environment, day: day, model: ranks.model), default: ModelHours()]
                .add(time, day: day)
            let projectKey = ProjectKey(
                project: fact.project, hour: hour, kind: ranks.kind, version: ranks.version, environment: ranks.environment)
            projects[projectKey, default: 0] += 1
        }
        let dayRows = days.sorted {
            let (x, y) = (
                ($0.key.project, $0.key.day, $0.key.group, $0.key.app, $0.key.version, $0.key.os),
                ($1.key.project, $1.key.day, $1.key.group, $1.key.app, $1.key.version, $1.key.os)
            )
            return x != y ? x < y : $0.key.environment < $1.key.environment
        }
        let facetRows = facets.sorted {
            ($0.key.group, $0.key.facet, $0.key.value) < ($1.key.group, $1.key.facet, $1.key.value)
        }
        let modelRows = models.sorted {
            ($0.key.group, $0.key.environment, $0.key.day, $0.key.model) < ($1.key.group, $1.key.environment, $1.key.day, $1.key.model)
        }
        let projectRows = projects.sorted {
            ($0.key.project, $0.key.hour, $0.key.kind, $0.key.version, $0.key.environment)
                < ($1.key.project, $1.key.hour, $1.key.kind, $1.key.version, $1.key.environment)
        }
        return QueryRollupRows(
            days: dayRows, facets: facetRows, models: modelRows, projects: projectRows)
    }

    private static func count(_ entry: inout (n: Int64, first: Date, last: Date), at time: Date) {
        entry.n += 1
        entry.first = min(entry.first, time)
        entry.last = max(entry.last, time)
    }
}

/// A `group_environment_model_daily` or `group_environment_hours` row's counts (schema.sql):
/// the day's reports, and the same by hour of the day.
struct ModelHours: Sendable {
    var count: Int64 = 0
    var hours = [Int64](repeating: 0, count: 24)

    /// Counts `n` reports at `time` of the UTC day that starts at `day`.
    mutating func add(_ time: Date, day: Date, count n: Int64 = 1) {
        count += n
        hours[min(23, max(0, Int(time.timeIntervalSince(day) / TimeWindow.hour)))] += n
    }

    /// The `hours` column: an entry per hour with reports, the hour (0-23) then the count as a
    /// big-endian uint32, by hour (what `crashguard_model_hours` reads). A fold's counts are
    /// at most its reports (5,000), and the stored sums would need 2^32 reports of one group
    /// and model in one hour to wrap: 32 bits keep the entry at 5 bytes.
    var encoded: ByteBuffer {
        var buffer = ByteBuffer()
        for (hour, n) in hours.enumerated() where n != 0 {
            buffer.writeInteger(UInt8(hour))
            buffer.writeInteger(UInt32(truncatingIfNeeded: n), endianness: .big)
        }
        return buffer
    }
}
