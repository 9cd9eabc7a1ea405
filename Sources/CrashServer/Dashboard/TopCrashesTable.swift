import Foundation

/// `crash-server top PROJECT`: the dashboard's top-crashes table for a terminal.
public struct TopCrashesTable: Sendable {
    /// `24h`, `7d` (default) or `30d`.
    public var window: String = "7d"
    /// Only reports of this app version.
    public var version: String?
    /// Only reports of this OS.
    public var os: String?
    /// Only groups of this kind (a report kind of the contract).
    public var kind: String?
    /// Only groups of this status (`open`, `resolved`, `ignored`, `regressed`); nil: all but ignored.
    public var status: String?
    /// Rows (1...200).
    public var limit: Int = 20
    /// Widest title shown, in characters.
    public var titleWidth: Int = 72

    public init() {}

    /// The table for `project` read through the query service's list, or a `ProjectError`
    /// naming the option that is wrong.
    public func render(database: CrashDatabase, project slug: String, now: Date = Date()) async throws -> String {
        guard let w = DashboardWindow(rawValue: window) else {
            throw ProjectError(description: "--window: must be 24h, 7d or 30d")
        }
        let request = try listRequest(window: w, now: now)
        guard let project = try await PostgresProjectStore(database: database).project(slug: slug) else {
            throw ProjectError(description: "no project '\(slug)'")
        }
        let list = try await QueryService(store: PostgresQueryStore(database: database)).groups(project, request)
        return Self.format(list.groups, header: "\(slug): top crashes, last \(w.label)", now: now, titleWidth: titleWidth)
    }

    /// The dashboard's top-crashes list for these options; an empty filter means none.
    func listRequest(window: DashboardWindow, now: Date) throws -> GroupListRequest {
        guard (1...200).contains(limit) else { throw ProjectError(description: "--limit: must be an integer from 1 to 200") }
        var filters = GroupFilters(version: Self.nonEmpty(version), os: Self.nonEmpty(os))
        filters.kind = try Self.option("--kind", kind)
        filters.status = try Self.option("--status", status)
        return GroupListRequest(window: window.range(now: now).window, filters: filters, limit: limit, trend: window.interval)
    }

    /// `text` as one of `T`'s cases (nil when empty); a `ProjectError` listing them otherwise.
    private static func option<T: RawRepresentable & CaseIterable>(_ name: String, _ text: String?) throws -> T?
    where T.RawValue == String {
        guard let text = nonEmpty(text) else { return nil }
        guard let value = T(rawValue: text) else {
            throw ProjectError(description: "\(name): not one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    private static func nonEmpty(_ text: String?) -> String? { text?.isEmpty == false ? text : nil }

    /// The rows as aligned columns, with a block-character sparkline per row.
    static func format(_ groups: [GroupBody], header: String, now: Date, titleWidth: Int) -> String {
        var lines = [header]
        guard !groups.isEmpty else { return (lines + ["no crashes in this window"]).joined(separator: "\n") }
        let head = ["#", "REPORTS", "DEVICES", "TREND", "STATUS", "FIRST SEEN", "LAST SEEN", "VERSIONS", "TITLE"]
        var rows: [[String]] = [head]
        for (i, g) in groups.enumerated() {
            let new = now.timeIntervalSince(g.firstSeen) < TimeWindow.day ? " new" : ""
            rows.append([
                "\(i + 1)", DashboardFormat.number(g.count), DashboardFormat.number(g.devices),
                sparkline((g.trend ?? []).map(\.count), width: 24), g.status.rawValue,
                DashboardFormat.relative(g.firstSeen, now: now) + new, DashboardFormat.relative(g.lastSeen, now: now),
                clip(safe(DashboardFormat.versions(g.versions)), 18),
                clip(safe(g.title) + " [\(g.kind)\(g.fatal ? ", fatal" : "")]", titleWidth),
            ])
        }
        let widths = head.indices.map { c in rows.map { $0[c].count }.max() ?? 0 }
        let right: Set<Int> = [0, 1, 2]
        for row in rows {
            let cells = row.indices.map { c -> String in
                let pad = String(repeating: " ", count: widths[c] - row[c].count)
                return c == row.count - 1 ? row[c] : right.contains(c) ? pad + row[c] : row[c] + pad
            }
            lines.append(cells.joined(separator: "  "))
        }
        return lines.joined(separator: "\n")
    }

    /// `values` summed into at most `width` cells of ▁▂▃▄▅▆▇█ (a space for zero).
    static func sparkline(_ values: [Int64], width: Int) -> String {
        guard !values.isEmpty else { return "" }
        let cells = min(width, values.count)
        var sums = [Int64](repeating: 0, count: cells)
        for (i, v) in values.enumerated() { sums[i * cells / values.count] += v }
        let peak = max(sums.max() ?? 0, 1)
        let blocks = Array("▁▂▃▄▅▆▇█")
        return String(sums.map { $0 == 0 ? " " : blocks[min(7, Int((Double($0) / Double(peak)) * 7.999))] })
    }

    /// Attacker-controlled text without control characters (no terminal escape sequences).
    static func safe(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.map {
                    $0.properties.generalCategory == .control || $0.properties.generalCategory == .format ? "?" : $0
                }))
    }

    static func clip(_ text: String, _ width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(width - 1, 0))) + "…"
    }
}
