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
    /// ends read hourly rollups, whole days read daily ones. An empty piece is a range of
    /// length zero (`from == to`), which matches no row.
    struct Plan: Sendable {
        /// The part before the first whole hour, read from raw rows.
        var rawHead: TimeRange
        /// The part after the last whole hour, read from raw rows.
        var rawTail: TimeRange
        /// The whole hours before the first whole day.
        var hoursHead: TimeRange
        /// The whole hours after the last whole day.
        var hoursTail: TimeRange
        /// The whole days.
        var days: TimeRange

        /// The whole window read from raw rows (it holds no whole hour).
        fileprivate static func raw(_ from: Date, _ to: Date) -> Plan {
            let none = TimeRange(from: to, to: to)
            return Plan(rawHead: TimeRange(from: from, to: to), rawTail: none, hoursHead: none, hoursTail: none, days: none)
        }
    }

    var plan: Plan {
        let firstHour = Self.ceil(from, Self.hour)
        let endHour = Self.floor(to, Self.hour)
        guard firstHour < endHour else { return .raw(from, to) }
        let firstDay = Self.ceil(firstHour, Self.day)
        let endDay = Self.floor(endHour, Self.day)
        let rawHead = TimeRange(from: from, to: firstHour)
        let rawTail = TimeRange(from: endHour, to: to)
        guard firstDay < endDay else {
            let none = TimeRange(from: endHour, to: endHour)
            return Plan(
                rawHead: rawHead, rawTail: rawTail, hoursHead: TimeRange(from: firstHour, to: endHour), hoursTail: none, days: none)
        }
        return Plan(
            rawHead: rawHead, rawTail: rawTail, hoursHead: TimeRange(from: firstHour, to: firstDay),
            hoursTail: TimeRange(from: endDay, to: endHour), days: TimeRange(from: firstDay, to: endDay))
    }

    /// The whole hours and days of the plan, read as cheaply as possible from tables that
    /// hold both days and hours: an edge of more than 12 hours is read as its whole day
    /// minus the hours outside the window, so at most 12 hourly rows per edge and group.
    struct SubtractivePlan: Sendable {
        /// Hours counted with a sign: +1 adds them to the days, -1 takes them away.
        struct SignedHours: Sendable {
            var range: TimeRange
            var sign: Int64
        }

        var days: TimeRange
        /// The hours at the start (empty ones are `(to, to)`).
        var head: SignedHours
        /// The hours at the end.
        var tail: SignedHours
    }

    var subtractivePlan: SubtractivePlan {
        let p = plan
        var result = SubtractivePlan(
            days: p.days, head: .init(range: p.hoursHead, sign: 1), tail: .init(range: p.hoursTail, sign: 1))
        guard p.days.from < p.days.to else { return result }
        if p.hoursHead.to.timeIntervalSince(p.hoursHead.from) > 12 * Self.hour {
            result.days.from = p.hoursHead.to.addingTimeInterval(-Self.day)
            result.head = .init(range: TimeRange(from: result.days.from, to: p.hoursHead.from), sign: -1)
        }
        if p.hoursTail.to.timeIntervalSince(p.hoursTail.from) > 12 * Self.hour {
            result.days.to = p.hoursTail.from.addingTimeInterval(Self.day)
            result.tail = .init(range: TimeRange(from: p.hoursTail.to, to: result.days.to), sign: -1)
        }
        return result
    }

    /// The whole UTC days and hours whose device sketches estimate the devices of the window
    /// widened to whole hours (no raw pieces). Sketches merge but cannot subtract, so a partial
    /// day at an edge is read as its day row (one sketch instead of up to 23 hours of them) only
    /// where the part of the day outside the window adds (nearly) nothing:
    /// - at the end, when the rest of the day is at or after `now`: it holds no report but those
    ///   timestamped in the future (clock-skewed ones). Every window that ends now does so, the
    ///   default one included;
    /// - at the start, when the hours of the day before the window are at most 1/14 of the
    ///   window (12 hours of 7 days) and none is before `notBefore` (the retention's cut-off):
    ///   devices seen only then are counted too, at most about 7 % more for a group whose
    ///   devices do not recur, half that on average over the hours of the day.
    ///
    /// Other edges read their hours.
    func sketchPlan(now: Date, notBefore: Date) -> Plan {
        let from = Self.floor(self.from, Self.hour)
        let to = Self.ceil(self.to, Self.hour)
        let none = TimeRange(from: to, to: to)
        guard from < to else { return Plan(rawHead: none, rawTail: none, hoursHead: none, hoursTail: none, days: none) }
        let headDay = Self.floor(from, Self.day)
        let wholeHead = from.timeIntervalSince(headDay) * 14 <= to.timeIntervalSince(from) && headDay >= notBefore
        let daysFrom = wholeHead ? headDay : Self.ceil(from, Self.day)
        let daysTo = to >= now ? Self.ceil(to, Self.day) : Self.floor(to, Self.day)
        guard daysFrom < daysTo else {
            return Plan(rawHead: none, rawTail: none, hoursHead: TimeRange(from: from, to: to), hoursTail: none, days: none)
        }
        return Plan(
            rawHead: none, rawTail: none,
            hoursHead: from < daysFrom ? TimeRange(from: from, to: daysFrom) : none,
            hoursTail: daysTo < to ? TimeRange(from: daysTo, to: to) : none,
            days: TimeRange(from: daysFrom, to: daysTo))
    }

    /// The window widened to whole hours at the edges where that reads fewer raw reports, and
    /// the pieces it gained, whose reports a count takes away again. An edge inside an hour is
    /// widened to that hour when the part of the hour outside the window is the shorter, leaving
    /// out what of it is after `now` (only reports timestamped in the future are there): a
    /// count then reads at most half an hour of raw reports at an edge, and next to none at a
    /// `to` of about now, instead of up to a whole hour of them. A window within one hour stays
    /// as it is.
    func widenedToHours(now: Date) -> (window: TimeWindow, outside: [TimeRange]) {
        let firstHour = Self.ceil(from, Self.hour)
        let endHour = Self.floor(to, Self.hour)
        guard firstHour <= endHour else { return (self, []) }
        var widened = self
        var outside: [TimeRange] = []
        let headStart = Self.floor(from, Self.hour)
        if from < firstHour, from.timeIntervalSince(headStart) < firstHour.timeIntervalSince(from) {
            widened.from = headStart
            outside.append(TimeRange(from: headStart, to: from))
        }
        let tailEnd = Self.ceil(to, Self.hour)
        if endHour < to, max(0, min(tailEnd, now).timeIntervalSince(to)) < to.timeIntervalSince(endHour) {
            widened.to = tailEnd
            outside.append(TimeRange(from: to, to: tailEnd))
        }
        return (widened, outside)
    }

    /// The whole window read from raw reports (filters no rollup holds: `context` terms).
    var reportsPlan: Plan { .raw(from, to) }

    /// Hour-only plan (no daily rollup), for reads from hourly tables: all whole hours are
    /// ``Plan/hoursHead``.
    var hourPlan: Plan {
        let firstHour = Self.ceil(from, Self.hour)
        let endHour = Self.floor(to, Self.hour)
        guard firstHour < endHour else { return .raw(from, to) }
        let none = TimeRange(from: endHour, to: endHour)
        return Plan(
            rawHead: TimeRange(from: from, to: firstHour), rawTail: TimeRange(from: endHour, to: to),
            hoursHead: TimeRange(from: firstHour, to: endHour), hoursTail: none, days: none)
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

/// `[from, to)` of timestamps; empty when `from == to`.
struct TimeRange: Sendable, Hashable {
    var from: Date
    var to: Date

    /// The starts of the UTC days it overlaps, as a range (`[day of from, to)`): the daily
    /// rows that hold its hours. Empty when it is.
    var days: TimeRange { from < to ? TimeRange(from: TimeWindow.floor(from, TimeWindow.day), to: to) : self }
}
