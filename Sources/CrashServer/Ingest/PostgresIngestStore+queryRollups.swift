import CrashWire
import Foundation

extension CrashDatabase {
    // Text fields are ``BatchText`` ranks, which sort as their strings do.
    struct DayKey: Hashable { var p: Int64, g: Int64, d: Date, a: Int32, v: Int32, o: Int32 }
    struct FacetKey: Hashable { var p: Int64, g: Int64, f: Int32, v: Int32 }
    struct ModelKey: Hashable { var g: Int64, h: Date, m: Int32 }
    struct ProjectKey: Hashable { var p: Int64, h: Date, k: Int32, v: Int32 }

    /// The rows that newly stored reports add to the rollups the query API reads (see
    /// schema.sql): `group_daily`, `group_facets` (app, version, os), `group_model_hourly` and
    /// `project_hourly`, each sorted by its key so concurrent batches lock rows in the same
    /// order. Written by ``writeReportsAndRollups(_:_:regressed:_:)``.
    struct QueryRollupRows {
        var days: [(key: DayKey, value: Int64)]
        var facets: [(key: FacetKey, value: (n: Int64, first: Date, last: Date))]
        var models: [(key: ModelKey, value: Int64)]
        var projects: [(key: ProjectKey, value: Int64)]

        static let empty = QueryRollupRows(days: [], facets: [], models: [], projects: [])
    }

    func queryRollupRows(_ stored: [IngestItem], _ groupIDs: [Int64], _ text: BatchText) -> QueryRollupRows {
        var days: [DayKey: Int64] = [:]
        var facets: [FacetKey: (n: Int64, first: Date, last: Date)] = [:]
        var models: [ModelKey: Int64] = [:]
        var projects: [ProjectKey: Int64] = [:]
        let (appFacet, versionFacet, osFacet) = (text.appFacet, text.versionFacet, text.osFacet)
        for ((item, g), ranks) in zip(zip(stored, groupIDs), text.reports) {
            let r = item.report
            let hour = TimeWindow.floor(r.timestamp, TimeWindow.hour)
            let day = TimeWindow.floor(r.timestamp, TimeWindow.day)
            days[DayKey(p: item.projectID, g: g, d: day, a: ranks.app, v: ranks.version, o: ranks.os), default: 0] += 1
            for (facet, value) in [(appFacet, ranks.app), (versionFacet, ranks.version), (osFacet, ranks.os)] {
                let time = r.timestamp
                // One hash per facet: the entry is made (or found) and changed in place.
                Self.count(&facets[FacetKey(p: item.projectID, g: g, f: facet, v: value), default: (0, time, time)], at: time)
            }
            models[ModelKey(g: g, h: hour, m: ranks.model), default: 0] += 1
            projects[ProjectKey(p: item.projectID, h: hour, k: ranks.kind, v: ranks.version), default: 0] += 1
        }
        let d = days.sorted {
            ($0.key.p, $0.key.d, $0.key.g, $0.key.a, $0.key.v, $0.key.o) < ($1.key.p, $1.key.d, $1.key.g, $1.key.a, $1.key.v, $1.key.o)
        }
        let f = facets.sorted { ($0.key.g, $0.key.f, $0.key.v) < ($1.key.g, $1.key.f, $1.key.v) }
        let m = models.sorted { ($0.key.g, $0.key.h, $0.key.m) < ($1.key.g, $1.key.h, $1.key.m) }
        let p = projects.sorted { ($0.key.p, $0.key.h, $0.key.k, $0.key.v) < ($1.key.p, $1.key.h, $1.key.k, $1.key.v) }
        return QueryRollupRows(days: d, facets: f, models: m, projects: p)
    }

    private static func count(_ c: inout (n: Int64, first: Date, last: Date), at time: Date) {
        c.n += 1
        c.first = min(c.first, time)
        c.last = max(c.last, time)
    }
}
