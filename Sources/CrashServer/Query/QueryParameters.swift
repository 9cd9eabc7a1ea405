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

    /// The longest window a query may ask for.
    static let maxDays: Double = 400

    /// `[from, to)` if `from <= to` and it spans at most ``maxDays``; else a 400 naming `name`.
    static func checked(from: Date, to: Date, name: String) throws -> TimeWindow {
        guard from <= to else { throw APIError.badRequest("\(name): the window's from is after its to") }
        guard to.timeIntervalSince(from) <= maxDays * day else {
            throw APIError.badRequest("\(name): the window is longer than \(Int(maxDays)) days")
        }
        return TimeWindow(from: from, to: to)
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

    /// How many buckets ``buckets(_:)`` gives, computed without listing them (a window of
    /// centuries by hour is refused before anything is built for it).
    func bucketCount(_ unit: Double) -> Int {
        let start = Self.floor(from, unit)
        guard start < to else { return 0 }
        return Int(min((to.timeIntervalSince(start) / unit).rounded(.up), Double(Int32.max)))
    }

    /// Refuses a window whose `unit` buckets alone are more than an answer may hold
    /// (``PointBudget/maxPoints``): a 400 naming `parameter`, the interval of the series.
    func checkBuckets(_ unit: StatsInterval, parameter: String) throws {
        let count = bucketCount(unit.seconds)
        guard count <= PointBudget.maxPoints else {
            let other = unit == .hour ? " \(parameter)=day or" : ""
            throw APIError.badRequest(
                "\(parameter): the window has \(count) \(unit == .hour ? "hourly" : "daily") buckets, more than the "
                    + "\(PointBudget.maxPoints) points an answer may hold (the interval is too fine for the window); use\(other) a shorter window")
        }
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

/// The bound on what a stats or trend answer holds (contract, "Bounded queries"): at most
/// ``maxPoints`` points in all, series times buckets. A window whose buckets alone are more is
/// a 400 (``TimeWindow/checkBuckets(_:parameter:)``); past that, the series of highest total
/// count that fit are kept, ties by key, and the answer says `"truncated": true`.
enum PointBudget {
    static let maxPoints = 10_000

    /// How many series of `buckets` points fit (at least one).
    static func series(buckets: Int) -> Int { buckets == 0 ? Int.max : max(1, maxPoints / buckets) }

    /// The `limit` keys of `totals` with the highest totals, ties by key (UTF-8 order, as
    /// PostgreSQL's `COLLATE "C"`); all of them when they fit.
    static func top<Key: Hashable>(_ totals: [Key: Int64], limit: Int, key order: (Key, Key) -> Bool) -> Set<Key> {
        guard totals.count > limit else { return Set(totals.keys) }
        let ranked = totals.sorted { a, b in a.value != b.value ? a.value > b.value : order(a.key, b.key) }
        return Set(ranked.prefix(limit).map(\.key))
    }

    /// Byte order of optional keys, nil first.
    static func keyOrder(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return false
        case (nil, _): return true
        case (_, nil): return false
        case let (a?, b?): return a.utf8.lexicographicallyPrecedes(b.utf8)
        }
    }
}

/// Report-dimension and group filters of the crash list.
struct GroupFilters: Sendable, Hashable {
    var app: String?
    var version: String?
    var os: String?
    var kind: ReportKind?
    /// nil: every status but `ignored`.
    var status: GroupStatus?
}

/// The crash list's `sort`.
enum GroupSort: String, Sendable, CaseIterable {
    case count, lastSeen, firstSeen
}

/// The bucket of a time series: `interval` of stats, `trend` of the list.
enum StatsInterval: String, Sendable, CaseIterable {
    case hour, day

    /// The bucket's length in seconds.
    var seconds: Double { self == .hour ? TimeWindow.hour : TimeWindow.day }
}

/// The stats' `groupBy`.
enum StatsGrouping: String, Sendable, CaseIterable {
    case none, kind, version, fatal
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
    /// alone means the 7 days before it, a `from` alone ends at the default `to` (so a `from`
    /// past it is after its `to`: 400, as the contract reads).
    func window(now: Date = Date()) throws -> TimeWindow {
        let window = try requestedWindow(now: now)
        return try TimeWindow.checked(from: window.from, to: window.to, name: "from")
    }

    /// ``window(now:)`` for a time series by `unit`: `from` after `to` is a 400 naming `from`,
    /// then too many buckets for one answer a 400 naming `parameter`
    /// (``TimeWindow/checkBuckets(_:parameter:)``), then the window's length is checked.
    func window(now: Date = Date(), series unit: StatsInterval, parameter: String) throws -> TimeWindow {
        let window = try requestedWindow(now: now)
        guard window.from <= window.to else { throw APIError.badRequest("from: the window's from is after its to") }
        try window.checkBuckets(unit, parameter: parameter)
        return try TimeWindow.checked(from: window.from, to: window.to, name: "from")
    }

    /// `from`/`to` with their defaults, not yet checked.
    private func requestedWindow(now: Date) throws -> TimeWindow {
        let from = try date("from")
        let to = try date("to")
        let fallback = TimeWindow.lastSevenDays(now: now)
        let window: TimeWindow
        switch (from, to) {
        case let (f?, t?): window = TimeWindow(from: f, to: t)
        case let (f?, nil): window = TimeWindow(from: f, to: fallback.to)
        case let (nil, t?): window = TimeWindow(from: t.addingTimeInterval(-7 * TimeWindow.day), to: t)
        case (nil, nil): window = fallback
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
        filters.kind = try value("kind")
        filters.status = try value("status")
        return filters
    }

    func sort() throws -> GroupSort { try value("sort") ?? .count }

    /// `name` as one of `T`'s cases; a 400 listing them otherwise.
    func value<T: RawRepresentable & CaseIterable>(_ name: String) throws -> T? where T.RawValue == String {
        guard let text = try string(name) else { return nil }
        guard let value = T(rawValue: text) else {
            throw APIError.badRequest("\(name): not one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    /// Rejects parameters the endpoint does not know, naming the first.
    func onlyKnown(_ known: Set<String>) throws {
        if let unknown = values.keys.sorted().first(where: { !known.contains($0) }) {
            throw APIError.badRequest("\(unknown): unknown parameter")
        }
    }
}

/// A crash group's triage status (`regressed`: resolved, then seen again in a later version).
enum GroupStatus: String, Codable, Sendable, CaseIterable {
    case open, resolved, ignored, regressed
}

/// The opaque `cursor` of a list: where the previous page ended, plus what keeps the walk
/// stable. Small whatever the database's load: the first page's snapshot is kept
/// server-side (`list_snapshots`) and the cursor carries only its id. Every field is
/// checked on the way in, so a forged or damaged cursor is a 400, never a database error.
///
/// Bound to the list that issued it (contract, "Bounded queries"): it carries the project
/// and the list (``Order``: the crash list in one sort, or the reports of one group), and
/// any other project or list refuses it with a 400 naming `cursor`. A cursor holds no secret
/// (every field is the reader's own data), so the binding is a check, not a signature.
struct ListCursor: Codable, Sendable, Equatable {
    /// What the cursor walks: a crash list in one sort, or a group's reports.
    enum Order: String, Codable, Sendable {
        case count = "c", lastSeen = "l", firstSeen = "f", reports = "r"

        init(_ sort: GroupSort) {
            switch sort {
            case .count: self = .count
            case .lastSeen: self = .lastSeen
            case .firstSeen: self = .firstSeen
            }
        }
    }

    var order: Order
    /// The project whose list issued the cursor.
    var project: Int64
    /// The last item's sort key: a count, or a time in microseconds since 1970.
    var key: Int64
    /// The last item's group id (for reports: the group listed).
    var groupID: Int64
    /// The last report's id (reports only).
    var reportID: UUID?
    /// The window of the first page, in microseconds since 1970 (group lists only).
    var from: Int64?
    var to: Int64?
    /// The `list_snapshots` row holding the first page's database snapshot (group lists).
    var snapshot: Int64?

    /// Short keys: the cursor travels in a URL.
    private enum CodingKeys: String, CodingKey {
        case order = "s", project = "p", key = "k", groupID = "i", reportID = "u", from = "f", to = "t", snapshot = "n"
    }

    /// Microseconds of 0001-01-01 and of 9999-12-31T23:59:59.999999Z: the times a cursor may carry.
    static let timeRange: ClosedRange<Int64> = -62_135_596_800_000_000...253_402_300_799_999_999

    /// base64url of the JSON, unpadded.
    func encode() -> String {
        let data = (try? JSONEncoder().encode(self)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The window the cursor was made for, with the checks of `from`/`to`.
    var window: TimeWindow? {
        get throws {
            guard let from, let to else { return nil }
            return try TimeWindow.checked(from: Self.date(from), to: Self.date(to), name: "cursor")
        }
    }

    /// Decodes and checks a cursor of `order` issued by a list of `project`.
    static func decode(_ text: String, order: Order, project: Int64) throws -> ListCursor {
        let unknown = APIError.badRequest(
            "cursor: not a cursor from this list (use nextCursor as returned, on the same project, list and sort)")
        guard text.utf8.allSatisfy({ c in Self.base64URL.contains(c) }) else { throw unknown }
        var b64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.utf8.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64), let cursor = try? JSONDecoder().decode(ListCursor.self, from: data),
            cursor.order == order, cursor.project == project
        else { throw unknown }
        let malformed = APIError.badRequest("cursor: malformed")
        guard cursor.groupID > 0 else { throw malformed }
        switch order {
        case .count:
            guard cursor.key >= 0 else { throw malformed }
        case .lastSeen, .firstSeen, .reports:
            guard timeRange.contains(cursor.key) else { throw malformed }
        }
        if order == .reports {
            guard cursor.reportID != nil, cursor.from == nil, cursor.to == nil, cursor.snapshot == nil else { throw malformed }
        } else {
            guard cursor.reportID == nil, let from = cursor.from, let to = cursor.to,
                timeRange.contains(from), timeRange.contains(to)
            else { throw malformed }
            if let snapshot = cursor.snapshot, snapshot <= 0 { throw malformed }
            _ = try cursor.window
        }
        return cursor
    }

    private static let base64URL = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func micros(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) }
    static func date(_ micros: Int64) -> Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }
}
