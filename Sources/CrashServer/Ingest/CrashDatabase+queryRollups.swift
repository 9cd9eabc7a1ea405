import CrashWire
import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Adds newly stored reports to the rollups the query API reads (see schema.sql):
    /// `group_daily`, `group_facets` (app, version, os), `group_model_hourly` and `project_hourly`.
    ///
    /// One statement, set-based, keys sorted so concurrent batches lock rows in the same
    /// order; runs inside the ingest transaction (called from ``writeRollups``).
    func writeQueryRollups(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        struct DayKey: Hashable { var p: Int64, g: Int64, d: Date, a: String, v: String, o: String }
        struct FacetKey: Hashable { var p: Int64, g: Int64, f: String, v: String }
        struct ModelKey: Hashable { var g: Int64, h: Date, m: String }
        struct ProjectKey: Hashable { var p: Int64, h: Date, k: String, v: String }
        var days: [DayKey: Int64] = [:]
        var facets: [FacetKey: (n: Int64, first: Date, last: Date)] = [:]
        var models: [ModelKey: Int64] = [:]
        var projects: [ProjectKey: Int64] = [:]
        for item in stored {
            let r = item.report
            let g = groups[item.groupKey]!
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
        try await connection.query(
            """
            WITH daily AS (
                INSERT INTO group_daily AS t (project_id, group_id, day, app_id, app_version, os, count)
                SELECT * FROM unnest(\(d.map(\.key.p)), \(d.map(\.key.g)), \(d.map(\.key.d)), \(d.map(\.key.a)), \(d.map(\.key.v)),
                                     \(d.map(\.key.o)), \(d.map(\.value)))
                ON CONFLICT (project_id, day, group_id, app_id, app_version, os) DO UPDATE SET count = t.count + EXCLUDED.count
            ), facets AS (
                INSERT INTO group_facets AS t (project_id, group_id, facet, value, count, first_seen, last_seen)
                SELECT * FROM unnest(\(f.map(\.key.p)), \(f.map(\.key.g)), \(f.map(\.key.f)), \(f.map(\.key.v)), \(f.map(\.value.n)),
                                     \(f.map(\.value.first)), \(f.map(\.value.last)))
                ON CONFLICT (group_id, facet, value) DO UPDATE SET count = t.count + EXCLUDED.count,
                    first_seen = LEAST(t.first_seen, EXCLUDED.first_seen), last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)
            ), models AS (
                INSERT INTO group_model_hourly AS t (group_id, hour, model, count)
                SELECT * FROM unnest(\(m.map(\.key.g)), \(m.map(\.key.h)), \(m.map(\.key.m)), \(m.map(\.value)))
                ON CONFLICT (group_id, hour, model) DO UPDATE SET count = t.count + EXCLUDED.count
            )
            INSERT INTO project_hourly AS t (project_id, hour, kind, app_version, count)
            SELECT * FROM unnest(\(p.map(\.key.p)), \(p.map(\.key.h)), \(p.map(\.key.k)), \(p.map(\.key.v)), \(p.map(\.value)))
            ON CONFLICT (project_id, hour, kind, app_version) DO UPDATE SET count = t.count + EXCLUDED.count
            """, logger: logger)
    }
}
