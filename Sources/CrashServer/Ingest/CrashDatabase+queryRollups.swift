import CrashWire
import Foundation
import PostgresNIO

extension CrashDatabase {
    /// Adds newly stored reports to the rollups the query API reads (see schema.sql):
    /// `group_daily`, `group_facets`, `group_model_hourly` and `project_hourly`.
    ///
    /// One statement, set-based, keys sorted so concurrent batches lock rows in the same
    /// order; runs inside the ingest transaction (called from ``writeRollups``).
    func writeQueryRollups(_ stored: [IngestItem], _ groups: [GroupKey: Int64], _ connection: PostgresConnection) async throws {
        struct DayKey: Hashable { var p: Int64, g: Int64, d: Int64, a: String, v: String, o: String }
        struct FacetKey: Hashable { var p: Int64, g: Int64, f: String, v: String }
        struct ModelKey: Hashable { var g: Int64, h: Int64, m: String }
        struct ProjectKey: Hashable { var p: Int64, h: Int64, k: String, v: String }
        var days: [DayKey: Int64] = [:]
        var facets: [FacetKey: (n: Int64, first: Date, last: Date)] = [:]
        var models: [ModelKey: Int64] = [:]
        var projects: [ProjectKey: Int64] = [:]
        for item in stored {
            let r = item.report
            let g = groups[item.groupKey]!
            let hour = Int64(TimeWindow.floor(r.timestamp, TimeWindow.hour).timeIntervalSince1970)
            let day = Int64(TimeWindow.floor(r.timestamp, TimeWindow.day).timeIntervalSince1970)
            let os = r.device?.os ?? ""
            days[DayKey(p: item.projectID, g: g, d: day, a: r.app.id, v: r.app.version, o: os), default: 0] += 1
            var dims = [("app", r.app.id), ("version", r.app.version), ("os", os)]
            if let model = r.device?.model { dims.append(("model", model)) }
            for (facet, value) in dims {
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
        struct DayRow: Encodable { var p: Int64, g: Int64, d: Date, a: String, v: String, o: String, n: Int64 }
        struct FacetRow: Encodable { var p: Int64, g: Int64, f: String, v: String, n: Int64, a: Date, b: Date }
        struct ModelRow: Encodable { var g: Int64, h: Date, m: String, n: Int64 }
        struct ProjectRow: Encodable { var p: Int64, h: Date, k: String, v: String, n: Int64 }
        func date(_ s: Int64) -> Date { Date(timeIntervalSince1970: Double(s)) }
        let dayRows = days.sorted {
            ($0.key.p, $0.key.d, $0.key.g, $0.key.a, $0.key.v, $0.key.o) < ($1.key.p, $1.key.d, $1.key.g, $1.key.a, $1.key.v, $1.key.o)
        }
        .map { DayRow(p: $0.key.p, g: $0.key.g, d: date($0.key.d), a: $0.key.a, v: $0.key.v, o: $0.key.o, n: $0.value) }
        let facetRows = facets.sorted { ($0.key.g, $0.key.f, $0.key.v) < ($1.key.g, $1.key.f, $1.key.v) }
            .map { FacetRow(p: $0.key.p, g: $0.key.g, f: $0.key.f, v: $0.key.v, n: $0.value.n, a: $0.value.first, b: $0.value.last) }
        let modelRows = models.sorted { ($0.key.g, $0.key.h, $0.key.m) < ($1.key.g, $1.key.h, $1.key.m) }
            .map { ModelRow(g: $0.key.g, h: date($0.key.h), m: $0.key.m, n: $0.value) }
        let projectRows = projects.sorted { ($0.key.p, $0.key.h, $0.key.k, $0.key.v) < ($1.key.p, $1.key.h, $1.key.k, $1.key.v) }
            .map { ProjectRow(p: $0.key.p, h: date($0.key.h), k: $0.key.k, v: $0.key.v, n: $0.value) }
        try await connection.query(
            """
            WITH daily AS (
                INSERT INTO group_daily AS t (project_id, group_id, day, app_id, app_version, os, count)
                SELECT p, g, d, a, v, o, n FROM json_to_recordset(\(try Self.json(dayRows))::json)
                    AS r(p bigint, g bigint, d timestamptz, a text, v text, o text, n bigint)
                ON CONFLICT (project_id, day, group_id, app_id, app_version, os) DO UPDATE SET count = t.count + EXCLUDED.count
            ), facets AS (
                INSERT INTO group_facets AS t (project_id, group_id, facet, value, count, first_seen, last_seen)
                SELECT p, g, f, v, n, a, b FROM json_to_recordset(\(try Self.json(facetRows))::json)
                    AS r(p bigint, g bigint, f text, v text, n bigint, a timestamptz, b timestamptz)
                ON CONFLICT (group_id, facet, value) DO UPDATE SET count = t.count + EXCLUDED.count,
                    first_seen = LEAST(t.first_seen, EXCLUDED.first_seen), last_seen = GREATEST(t.last_seen, EXCLUDED.last_seen)
            ), models AS (
                INSERT INTO group_model_hourly AS t (group_id, hour, model, count)
                SELECT g, h, m, n FROM json_to_recordset(\(try Self.json(modelRows))::json)
                    AS r(g bigint, h timestamptz, m text, n bigint)
                ON CONFLICT (group_id, hour, model) DO UPDATE SET count = t.count + EXCLUDED.count
            )
            INSERT INTO project_hourly AS t (project_id, hour, kind, app_version, count)
            SELECT p, h, k, v, n FROM json_to_recordset(\(try Self.json(projectRows))::json)
                AS r(p bigint, h timestamptz, k text, v text, n bigint)
            ON CONFLICT (project_id, hour, kind, app_version) DO UPDATE SET count = t.count + EXCLUDED.count
            """, logger: logger)
    }
}
