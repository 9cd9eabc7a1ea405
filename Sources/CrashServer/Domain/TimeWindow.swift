import Foundation

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
