import CrashWire
import Foundation

extension CrashDatabase {
    struct DayKey: Hashable { var p: Int64, g: Int64, d: Date, a: String, v: String, o: String }
    struct FacetKey: Hashable { var p: Int64, g: Int64, f: String, v: String }
    struct ModelKey: Hashable { var g: Int64, h: Date, m: String }
    struct ProjectKey: Hashable { var p: Int64, h: Date, k: String, v: String }

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

    func queryRollupRows(_ stored: [IngestItem], _ groupIDs: [Int64]) -> QueryRollupRows {
        var days: [DayKey: Int64] = [:]
        var facets: [FacetKey: (n: Int64, first: Date, last: Date)] = [:]
        var models: [ModelKey: Int64] = [:]
        var projects: [ProjectKey: Int64] = [:]
        for (item, g) in zip(stored, groupIDs) {
            let r = item.report
            let hour = TimeWindow.floor(r.timestamp, TimeWindow.hour)
            let day = TimeWindow.floor(r.timestamp, TimeWindow.day)
            let os = r.device?.os ?? ""
            days[DayKey(p: item.projectID, g: g, d: day, a: r.app.id, v: r.app.version, o: os), default: 0] += 1
            for (facet, value) in [("app", r.app.id), ("version", r.app.version), ("os", os)] {
                let key = FacetKey(p: item.projectID, g: g, f: facet, v: value)
                if var c = facets[key] {
                    c.n += 1
                    c.first = min(c.first, r.timestamp)
                    c.last = max(c.last, r.timestamp)
                    facets[key] = c
                } else {
                    facets[key] = (1, r.timestamp, r.timestamp)
                }
            }
            models[ModelKey(g: g, h: hour, m: r.device?.model ?? ""), default: 0] += 1
            projects[ProjectKey(p: item.projectID, h: hour, k: r.kind.rawValue, v: r.app.version), default: 0] += 1
        }
        let d = days.sorted {
            ($0.key.p, $0.key.d, $0.key.g, $0.key.a, $0.key.v, $0.key.o) < ($1.key.p, $1.key.d, $1.key.g, $1.key.a, $1.key.v, $1.key.o)
        }
        let f = facets.sorted { ($0.key.g, $0.key.f, $0.key.v) < ($1.key.g, $1.key.f, $1.key.v) }
        let m = models.sorted { ($0.key.g, $0.key.h, $0.key.m) < ($1.key.g, $1.key.h, $1.key.m) }
        let p = projects.sorted { ($0.key.p, $0.key.h, $0.key.k, $0.key.v) < ($1.key.p, $1.key.h, $1.key.k, $1.key.v) }
        return QueryRollupRows(days: d, facets: f, models: m, projects: p)
    }
}
