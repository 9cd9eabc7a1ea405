import CrashWire
import Foundation
import Mustache

/// Text and geometry the pages show: numbers, times, sparklines and bar charts. Everything
/// here is plain values; escaping is the templates' job (`{{ }}` only).
enum DashboardFormat {
    /// `12,345`.
    static func number(_ n: Int64) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return n < 0 ? "-" + out : out
    }

    /// `2026-11-23 14:05 UTC`.
    static func exact(_ date: Date) -> String {
        let c = utc.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        return String(format: "%04d-%02d-%02d %02d:%02d UTC", c.year ?? 0, c.month ?? 0, c.day ?? 0, c.hour ?? 0, c.minute ?? 0)
    }

    /// `just now`, `5 min ago`, `3 h ago`, `2 d ago`, then `Nov 3` / `Nov 3, 2025`.
    static func relative(_ date: Date, now: Date) -> String {
        let s = now.timeIntervalSince(date)
        if s < 60 { return "just now" }
        if s < 3600 { return "\(Int(s / 60)) min ago" }
        if s < 86_400 { return "\(Int(s / 3600)) h ago" }
        if s < 30 * 86_400 { return "\(Int(s / 86_400)) d ago" }
        let c = utc.dateComponents([.year, .month, .day], from: date)
        let y = utc.component(.year, from: now)
        let month = monthNames[(c.month ?? 1) - 1]
        return c.year == y ? "\(month) \(c.day ?? 0)" : "\(month) \(c.day ?? 0), \(c.year ?? 0)"
    }

    /// Axis and tooltip label of a bucket: `Nov 23 14:00` for hours, `Nov 23` for days.
    static func bucket(_ date: Date, hourly: Bool) -> String {
        let c = utc.dateComponents([.month, .day, .hour], from: date)
        let day = "\(monthNames[(c.month ?? 1) - 1]) \(c.day ?? 0)"
        return hourly ? day + String(format: " %02d:00", c.hour ?? 0) : day
    }

    /// Up to three versions, then `+n`.
    static func versions(_ list: [String]) -> String {
        guard !list.isEmpty else { return "–" }
        let shown = list.prefix(3).joined(separator: ", ")
        return list.count > 3 ? shown + " +\(list.count - 3)" : shown
    }

    static func statusLabel(_ status: GroupStatus) -> String {
        switch status {
        case .open: "Open"
        case .resolved: "Resolved"
        case .ignored: "Ignored"
        case .regressed: "Regressed"
        }
    }

    /// Polyline and area points of a 120 x 28 sparkline over `values`.
    static func sparkline(_ values: [Int64], width: Double = 120, height: Double = 28) -> (line: String, area: String) {
        guard !values.isEmpty else { return ("0,\(height) \(width),\(height)", "") }
        let maxValue = Double(max(values.max() ?? 0, 1))
        let step = values.count > 1 ? width / Double(values.count - 1) : width
        let top = 2.0, usable = height - top - 1
        let points = values.enumerated().map { i, v in
            (Double(i) * step, height - 1 - usable * Double(v) / maxValue)
        }
        var pts = points
        if pts.count == 1 { pts.append((width, pts[0].1)) }
        let line = pts.map { fmt($0.0) + "," + fmt($0.1) }.joined(separator: " ")
        let area = "0," + fmt(height) + " " + line + " " + fmt(pts.last!.0) + "," + fmt(height)
        return (line, area)
    }

    /// `x` to one decimal (an SVG coordinate). By hand: a 7-day page draws 25 hourly
    /// sparklines, 8,400 numbers, and `String(format:)` costs about a microsecond each on Linux.
    static func fmt(_ x: Double) -> String {
        let tenths = Int((x * 10).rounded())
        let magnitude = tenths.magnitude
        return (tenths < 0 ? "-" : "") + String(magnitude / 10) + "." + String(magnitude % 10)
    }

    static let utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
}

/// A bar chart of buckets (optionally split fatal/non-fatal), as SVG rectangles in a
/// `width` x `height` view box.
struct ChartView: Sendable {
    struct Bar: Sendable {
        var label: String
        var total: String
        var fatal: String
        var x: String, w: String
        var y: String, h: String
        var fy: String, fh: String
    }
    var width = 960
    var height = 180
    var mid = 90
    var unit: String
    var max: String
    var bars: [Bar]
    var ticks: [String]

    init(points: [(t: Date, total: Int64, fatal: Int64)], hourly: Bool) {
        unit = hourly ? "hour" : "day"
        let peak = points.map(\.total).max() ?? 0
        max = DashboardFormat.number(peak)
        let height = Double(self.height), width = Double(self.width)
        let scale = (height - 4) / Double(Swift.max(peak, 1))
        let slot = width / Double(Swift.max(points.count, 1))
        let gap = slot > 6 ? Swift.max(1, slot * 0.18) : slot * 0.12
        bars = points.enumerated().map { i, p in
            let h = Double(p.total) * scale
            let fh = Double(p.fatal) * scale
            let minimum = p.total > 0 ? Swift.max(h, 1.5) : 0
            return Bar(
                label: DashboardFormat.bucket(p.t, hourly: hourly), total: DashboardFormat.number(p.total),
                fatal: DashboardFormat.number(p.fatal),
                x: DashboardFormat.fmt(Double(i) * slot + gap / 2), w: DashboardFormat.fmt(Swift.max(slot - gap, 0.5)),
                y: DashboardFormat.fmt(height - minimum), h: DashboardFormat.fmt(minimum),
                fy: DashboardFormat.fmt(height - fh), fh: DashboardFormat.fmt(fh))
        }
        let count = points.count
        let marks = count < 2 ? [0] : [0, count / 4, count / 2, 3 * count / 4, count - 1]
        var seen = Set<Int>()
        ticks = marks.filter { seen.insert($0).inserted && $0 < count }.map {
            DashboardFormat.bucket(points[$0].t, hourly: hourly)
        }
    }
}

/// A bar answers Mustache from a switch, not a `Mirror` (see `GroupView: MustacheParent`): a
/// 7-day chart draws 168 bars of 11 lookups each, and a `Mirror` lookup reflects all nine
/// fields every time.
extension ChartView.Bar: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "label": label
        case "total": total
        case "fatal": fatal
        case "x": x
        case "w": w
        case "y": y
        case "h": h
        case "fy": fy
        case "fh": fh
        default: nil
        }
    }
}
