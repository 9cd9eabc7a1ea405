import CrashWire
import Foundation
import Hummingbird

/// A `[from, to)` window of client timestamps, and how it splits over the rollups.
struct TimeWindow: Sendable, Hashable {
    var from: Date
    var to: Date

    static let hour: Double = 3600
    static let day: Double = 86_400

    /// The default: the last 7 days widened to whole hours, from the start of the hour
    /// 7 days ago to the end of the current hour (whole hours read only rollups).
    static func lastSevenDays(now: Date = Date()) -> TimeWindow {
        TimeWindow(from: floor(now.addingTimeInterval(-7 * day), hour), to: floor(now, hour).addingTimeInterval(hour))
    }

    static func floor(_ date: Date, _ unit: Double) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / unit).rounded(.down) * unit)
    }

    static func ceil(_ date: Date, _ unit: Double) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / unit).rounded(.up) * unit)
    }

    /// The window as rollup pieces: sub-hour edges read raw reports, whole hours at the
    /// ends read `group_hourly`, whole days read `group_daily`. Empty pieces are `(x, x)`.
    struct Plan: Sendable {
        var raw: [(Date, Date)]  // 2
        var hours: [(Date, Date)]  // 2
        var days: (Date, Date)
    }

    var plan: Plan {
        let h0 = Self.ceil(from, Self.hour)
        let h1 = Self.floor(to, Self.hour)
        guard h0 < h1 else { return Plan(raw: [(from, to), (to, to)], hours: [(to, to), (to, to)], days: (to, to)) }
        let d0 = Self.ceil(h0, Self.day)
        let d1 = Self.floor(h1, Self.day)
        let raw = [(from, h0), (h1, to)]
        guard d0 < d1 else { return Plan(raw: raw, hours: [(h0, h1), (h1, h1)], days: (h1, h1)) }
        return Plan(raw: raw, hours: [(h0, d0), (d1, h1)], days: (d0, d1))
    }

    /// The whole hours and days of the plan, read as cheaply as possible from tables that
    /// hold both days and hours: an edge of more than 12 hours is read as its whole day
    /// minus the hours outside the window, so at most 12 hourly rows per edge and group.
    struct SubtractivePlan: Sendable {
        var days: (Date, Date)
        /// Two hour ranges (empty ones are `(to, to)`), each added (+1) or subtracted (-1).
        var edges: [(from: Date, to: Date, sign: Int64)]
    }

    var subtractivePlan: SubtractivePlan {
        let p = plan
        guard p.days.0 < p.days.1 else {
            return SubtractivePlan(days: p.days, edges: p.hours.map { ($0.0, $0.1, 1) })
        }
        var days = p.days
        var edges: [(from: Date, to: Date, sign: Int64)] = p.hours.map { ($0.0, $0.1, 1) }
        let (h0, d0) = p.hours[0], (d1, h1) = p.hours[1]
        if d0.timeIntervalSince(h0) > 12 * Self.hour {
            days.0 = d0.addingTimeInterval(-Self.day)
            edges[0] = (days.0, h0, -1)
        }
        if h1.timeIntervalSince(d1) > 12 * Self.hour {
            days.1 = d1.addingTimeInterval(Self.day)
            edges[1] = (h1, days.1, -1)
        }
        return SubtractivePlan(days: days, edges: edges)
    }

    /// Hour-only plan (no daily rollup), for reads from hourly tables.
    var hourPlan: Plan {
        let h0 = Self.ceil(from, Self.hour)
        let h1 = Self.floor(to, Self.hour)
        guard h0 < h1 else { return Plan(raw: [(from, to), (to, to)], hours: [(to, to), (to, to)], days: (to, to)) }
        return Plan(raw: [(from, h0), (h1, to)], hours: [(h0, h1), (h1, h1)], days: (h1, h1))
    }

    /// Bucket starts from the bucket holding `from` up to `to` (exclusive).
    func buckets(_ unit: Double) -> [Date] {
        var out: [Date] = []
        var t = Self.floor(from, unit)
        while t < to {
            out.append(t)
            t = t.addingTimeInterval(unit)
        }
        return out
    }
}

/// Report-dimension and group filters of the crash list.
struct GroupFilters: Sendable, Hashable {
    var app: String?
    var version: String?
    var os: String?
    var kind: String?
    /// nil: every status but `ignored`.
    var status: String?
}

enum GroupSort: String, Sendable {
    case count, lastSeen, firstSeen
}

/// The query string of a request, parsed with 400s that name the bad parameter.
struct QueryParameters {
    let values: [String: String]

    init(_ request: Request) {
        var values: [String: String] = [:]
        for (key, value) in request.uri.queryParameters { values[String(key)] = String(value) }
        self.values = values
    }

    init(_ values: [String: String]) { self.values = values }

    func string(_ name: String) throws -> String? {
        guard let value = values[name] else { return nil }
        guard !value.isEmpty else { throw APIError.badRequest("\(name): must not be empty") }
        guard value.utf8.count <= 256 else { throw APIError.badRequest("\(name): longer than 256 bytes") }
        return value
    }

    func date(_ name: String) throws -> Date? {
        // A `+` offset arrives as a space when the client did not percent-encode it.
        guard let text = try string(name)?.replacingOccurrences(of: " ", with: "+") else { return nil }
        guard let date = RFC3339.parse(text) else { throw APIError.badRequest("\(name): not an RFC 3339 date-time") }
        return date
    }

    /// `from`/`to`: each defaults as in ``TimeWindow/lastSevenDays(now:)``; a given `to`
    /// alone means the 7 days before it.
    func window(now: Date = Date()) throws -> TimeWindow {
        let from = try date("from")
        let to = try date("to")
        let fallback = TimeWindow.lastSevenDays(now: now)
        let window: TimeWindow
        switch (from, to) {
        case let (f?, t?): window = TimeWindow(from: f, to: t)
        case let (f?, nil): window = TimeWindow(from: f, to: max(f, fallback.to))
        case let (nil, t?): window = TimeWindow(from: t.addingTimeInterval(-7 * TimeWindow.day), to: t)
        case (nil, nil): window = fallback
        }
        guard window.from <= window.to else { throw APIError.badRequest("from: after to") }
        guard window.to.timeIntervalSince(window.from) <= 400 * TimeWindow.day else {
            throw APIError.badRequest("from: the window is longer than 400 days")
        }
        return window
    }

    func limit(default value: Int = 50) throws -> Int {
        guard let text = try string("limit") else { return value }
        guard let n = Int(text), (1...200).contains(n) else { throw APIError.badRequest("limit: must be an integer from 1 to 200") }
        return n
    }

    func filters() throws -> GroupFilters {
        var filters = GroupFilters(app: try string("app"), version: try string("version"), os: try string("os"))
        if let kind = try string("kind") {
            guard ReportKind(rawValue: kind) != nil else {
                throw APIError.badRequest("kind: not one of \(ReportKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            filters.kind = kind
        }
        if let status = try string("status") {
            guard GroupStatus.all.contains(status) else {
                throw APIError.badRequest("status: not one of \(GroupStatus.all.joined(separator: ", "))")
            }
            filters.status = status
        }
        return filters
    }

    func sort() throws -> GroupSort {
        guard let text = try string("sort") else { return .count }
        guard let sort = GroupSort(rawValue: text) else { throw APIError.badRequest("sort: not one of count, lastSeen, firstSeen") }
        return sort
    }

    /// Rejects parameters the endpoint does not know, naming the first.
    func onlyKnown(_ known: Set<String>) throws {
        if let unknown = values.keys.sorted().first(where: { !known.contains($0) }) {
            throw APIError.badRequest("\(unknown): unknown parameter")
        }
    }
}

enum GroupStatus {
    static let all = ["open", "resolved", "ignored", "regressed"]
}

/// The opaque `cursor` of a list: where the previous page ended, plus what keeps the walk
/// stable (the window and, for counts, the database snapshot of the first page).
struct ListCursor: Codable, Sendable, Equatable {
    /// Sort the cursor was made for (`c`, `l`, `f`, or `r` for a report list).
    var s: String
    /// The last item's sort key: a count, or a time in microseconds since 1970.
    var k: Int64
    /// The last item's id (group id; for reports, the report uuid in `u`).
    var i: Int64
    var u: String?
    /// Window of the first page, in microseconds.
    var f: Int64?
    var t: Int64?
    /// `pg_current_snapshot()` of the first page (count sort).
    var n: String?

    func encode() -> String {
        let data = (try? JSONEncoder().encode(self)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: String, sort: String) throws -> ListCursor {
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64), let cursor = try? JSONDecoder().decode(ListCursor.self, from: data),
            cursor.s == sort
        else { throw APIError.badRequest("cursor: not a cursor from this list (use nextCursor as returned, with the same sort)") }
        if let n = cursor.n, !n.allSatisfy({ $0.isNumber || $0 == ":" || $0 == "," }) {
            throw APIError.badRequest("cursor: malformed")
        }
        return cursor
    }

    static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }
    static func date(_ micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }
}
