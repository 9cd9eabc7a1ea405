import CrashWire
import Foundation
import Synchronization

@testable import CrashServer
@testable import CrashServerTestSupport

/// A ``QueryStore`` in memory, for route tests that need no PostgreSQL: statuses, headers,
/// validation, pagination shapes, authentication. Counts are exact (straight from the
/// reports), so it checks the controller, never the SQL: the PostgreSQL suites do that.
///
/// Simplifications, on purpose: a read's snapshot is a copy of the state; cursors keep no
/// snapshot (`timeKeysAsOf` is empty), and every window count is exact.
final class InMemoryCrashStore: QueryStore {
    struct Report: Sendable {
        var project: Int64
        var group: Int64
        var stored: StoredReport
        var micros: Int64 { ListCursor.micros(stored.timestamp) }
        var os: String { stored.device?.os ?? "" }
        var model: String { stored.device?.model ?? "" }
        var deviceID: String { stored.device?.id ?? "" }
    }

    struct State: Sendable {
        var projects: [String: ProjectRef] = [:]  // by read token
        var groups: [Int64: (project: Int64, row: GroupRow)] = [:]
        var reports: [Report] = []
        var snapshots: [Int64: String] = [:]
        var nextID: Int64 = 1
    }

    private let state = Mutex(State())
    /// The per-row reads asked for (`versions`, `deviceCounts`, `groupTrends`), by name, in order.
    private let rowReads = Mutex<[String]>([])

    /// The per-row reads asked for since the last call, by name, in order.
    func takeRowReads() -> [String] {
        rowReads.withLock { reads in
            defer { reads = [] }
            return reads
        }
    }

    /// Adds a project readable with `readToken`.
    @discardableResult
    func addProject(slug: String, readToken: String) -> ProjectRef {
        state.withLock { s in
            let project = ProjectRef(id: s.nextID, slug: slug)
            s.nextID += 1
            s.projects[readToken] = project
            return project
        }
    }

    /// Stores a report in the group of `signature` (made on first use); returns the group id.
    @discardableResult
    func add(
        _ project: ProjectRef, signature: String, kind: ReportKind = .custom, at time: Date, version: String = "1.0.0",
        os: String? = "iOS", model: String? = "iPhone14,2", device: String? = "device-1", fatal: Bool = false,
        environment: String = "production"
    ) -> Int64 {
        state.withLock { s in
            let id =
                s.groups.first { $0.value.project == project.id && $0.value.row.signature == signature }?.key
                ?? {
                    let id = s.nextID
                    s.nextID += 1
                    s.groups[id] = (
                        project.id,
                        GroupRow(
                            id: id, signature: signature, kind: kind.rawValue, groupingVersion: "v2", title: "\(kind.rawValue): \(signature)",
                            firstSeen: time, lastSeen: time, status: .open, fatal: fatal, resolvedIn: nil)
                    )
                    return id
                }()
            s.groups[id]!.row.firstSeen = min(s.groups[id]!.row.firstSeen, time)
            s.groups[id]!.row.lastSeen = max(s.groups[id]!.row.lastSeen, time)
            let report = StoredReport(
                id: UUID().uuidString.lowercased(), timestamp: time, kind: kind.rawValue, reason: signature, stack: ["frame 0"],
                fatal: fatal, app: AppInfo(id: "com.example.demo", version: version),
                device: DeviceInfo(os: os, osVersion: nil, model: model, id: device), fingerprint: nil, context: nil,
                receivedAt: time, environment: environment)
            s.reports.append(Report(project: project.id, group: id, stored: report))
            return id
        }
    }

    // MARK: - QueryStore

    func project(readToken: String) async throws -> ProjectRef? { state.withLock { $0.projects[readToken] } }

    func read<T: Sendable>(_ body: @escaping @Sendable (Reader) async throws -> T) async throws -> T {
        try await body(Reader(state: state.withLock { $0 }, logRowRead: { name in self.rowReads.withLock { $0.append(name) } }))
    }

    func saveListSnapshot(_ snapshot: String) async throws -> Int64 {
        state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s.snapshots[id] = snapshot
            return id
        }
    }

    /// Reads over a copy of the state.
    struct Reader: QueryReader {
        let state: State
        let logRowRead: @Sendable (String) -> Void

        private func matching(_ project: Int64, _ window: TimeWindow, _ f: GroupFilters) -> [Report] {
            state.reports.filter { r in
                r.project == project && r.stored.timestamp >= window.from && r.stored.timestamp < window.to
                    && (f.app == nil || r.stored.app.id == f.app) && (f.version == nil || r.stored.app.version == f.version)
                    && (f.os == nil || r.os == f.os) && (f.environments.isEmpty || f.environments.contains(r.stored.environment))
            }
        }

        private func passes(_ row: GroupRow, _ f: GroupFilters) -> Bool {
            (f.kind == nil || row.kind == f.kind?.rawValue) && (f.status.map { row.status == $0 } ?? (row.status != .ignored))
        }

        private func groups(_ project: Int64, _ window: TimeWindow, _ f: GroupFilters) -> [GroupRow] {
            state.groups.values.filter {
                $0.project == project && $0.row.lastSeen >= window.from && $0.row.firstSeen < window.to && passes($0.row, f)
            }.map(\.row)
        }

        func firstPageSnapshot() async throws -> (snapshot: String, asOf: String?) { ("memory", nil) }
        func listSnapshot(_ id: Int64) async throws -> String? { state.snapshots[id] }

        func windowCounts(
            project: Int64, ids: [Int64]?, window: TimeWindow, filters: GroupFilters, snapshot: String?
        ) async throws
            -> [Int64: Int64]
        {
            var counts: [Int64: Int64] = [:]
            for r in matching(project, window, filters) where ids?.contains(r.group) ?? true {
                guard let row = state.groups[r.group]?.row, passes(row, filters) else { continue }
                counts[r.group, default: 0] += 1
            }
            return counts
        }

        func countCandidates(
            project: Int64, window: TimeWindow, filters: GroupFilters, after: (bound: Int64, id: Int64)?, atLeast: Int64?,
            limit: Int
        )
            async throws -> [(id: Int64, bound: Int64)]
        {
            // Bound: the group's all-time count (under the report filters): never below a window count.
            let all = TimeWindow(from: .distantPast, to: .distantFuture)
            var totals: [Int64: Int64] = [:]
            for r in matching(project, all, filters) { totals[r.group, default: 0] += 1 }
            var out: [(id: Int64, bound: Int64)] = []
            for row in groups(project, window, filters) {
                guard let bound = totals[row.id], bound >= atLeast ?? 0 else { continue }
                if let after, !(bound < after.bound || (bound == after.bound && row.id > after.id)) { continue }
                out.append((row.id, bound))
            }
            out.sort { a, b in a.bound != b.bound ? a.bound > b.bound : a.id < b.id }
            return Array(out.prefix(limit))
        }

        func timeCandidates(
            project: Int64, sort: GroupSort, window: TimeWindow, filters: GroupFilters, after: (Int64, Int64)?, limit: Int
        )
            async throws -> [(id: Int64, key: Int64)]
        {
            var out: [(id: Int64, key: Int64)] = []
            for row in groups(project, window, filters) {
                let key = ListCursor.micros(sort == .firstSeen ? row.firstSeen : row.lastSeen)
                if let after, !(key < after.0 || (key == after.0 && row.id > after.1)) { continue }
                out.append((row.id, key))
            }
            out.sort { a, b in a.key != b.key ? a.key > b.key : a.id < b.id }
            return Array(out.prefix(limit))
        }

        func timeKeysAsOf(project: Int64, sort: GroupSort, snapshot: String) async throws -> [Int64: Int64?] { [:] }

        func groupRows(project: Int64, ids: [Int64]) async throws -> [Int64: GroupRow] {
            var out: [Int64: GroupRow] = [:]
            for id in ids { if let g = state.groups[id], g.project == project { out[id] = g.row } }
            return out
        }

        /// No project settings here: every report is kept.
        func retainedSince(project: Int64, now: Date) async throws -> Date { .distantPast }

        func firstSeen(ids: [Int64], since: Date, environments: [String]) async throws -> [Int64: Date] {
            var out: [Int64: Date] = [:]
            for r in state.reports
            where ids.contains(r.group) && r.stored.timestamp >= since
                && (environments.isEmpty || environments.contains(r.stored.environment))
            {
                out[r.group] = min(out[r.group] ?? r.stored.timestamp, r.stored.timestamp)
            }
            return out
        }

        func versions(ids: [Int64], since: Date) async throws -> [Int64: [String]] {
            logRowRead("versions")
            var out: [Int64: Set<String>] = [:]
            for r in state.reports where ids.contains(r.group) && r.stored.timestamp >= since {
                out[r.group, default: []].insert(r.stored.app.version)
            }
            return out.mapValues { set in
                set.sorted { a, b in
                    let c = AppVersion.compare(a, b)
                    return c != 0 ? c > 0 : a > b
                }
            }
        }

        func deviceCounts(
            project: Int64, counts: [Int64: Int64], window: TimeWindow, since: Date, filters: GroupFilters
        ) async throws -> [Int64: Int64] {
            logRowRead("deviceCounts")
            var devices: [Int64: Set<String>] = [:]
            for r in matching(project, window, filters) where counts[r.group] != nil && !r.deviceID.isEmpty {
                devices[r.group, default: []].insert(r.deviceID)
            }
            return devices.mapValues { Int64($0.count) }
        }

        func groupHistogram(group: Int64, window: TimeWindow, environments: [String]) async throws -> [Date: Int64] {
            var out: [Date: Int64] = [:]
            for r in state.reports
            where r.group == group && r.stored.timestamp >= window.from && r.stored.timestamp < window.to
                && (environments.isEmpty || environments.contains(r.stored.environment))
            {
                out[TimeWindow.floor(r.stored.timestamp, TimeWindow.hour), default: 0] += 1
            }
            return out
        }

        func environments(project: Int64, since: Date) async throws -> [String] {
            Set(state.reports.filter { $0.project == project && $0.stored.timestamp >= since }.map(\.stored.environment)).sorted()
        }

        func environmentTimes(ids: [Int64], environments: [String]) async throws -> [Int64: (first: Date, last: Date)] {
            var out: [Int64: (first: Date, last: Date)] = [:]
            for r in state.reports where ids.contains(r.group) && environments.contains(r.stored.environment) {
                let t = r.stored.timestamp
                out[r.group] = out[r.group].map { (min($0.first, t), max($0.last, t)) } ?? (t, t)
            }
            return out
        }

        func breakdown(group: Int64, window: TimeWindow, environments: [String]) async throws -> Breakdown {
            let reports = state.reports.filter {
                $0.group == group && $0.stored.timestamp >= window.from && $0.stored.timestamp < window.to
                    && (environments.isEmpty || environments.contains($0.stored.environment))
            }
            func top(_ value: (Report) -> String) -> [ValueCount] {
                var counts: [String: Int64] = [:]
                for r in reports where !value(r).isEmpty { counts[value(r), default: 0] += 1 }
                return counts.map { ValueCount(value: $0.key, count: $0.value) }
                    .sorted { $0.count != $1.count ? $0.count > $1.count : $0.value < $1.value }.prefix(10).map { $0 }
            }
            return Breakdown(
                versions: top { $0.stored.app.version }, os: top(\.os), models: top(\.model), environments: top { $0.stored.environment })
        }

        func reports(
            project: Int64, group: Int64, after: (micros: Int64, id: UUID)?, limit: Int, includeStack: Bool, environments: [String]
        ) async throws
            -> [(report: StoredReport, micros: Int64)]
        {
            // Newest first, then id descending (PostgreSQL's uuid order is that of the lowercase text).
            state.reports.filter {
                $0.project == project && $0.group == group && (environments.isEmpty || environments.contains($0.stored.environment))
            }
            .filter { r in
                after.map { r.micros < $0.micros || (r.micros == $0.micros && r.stored.id < $0.id.uuidString.lowercased()) } ?? true
            }
            .sorted { $0.micros != $1.micros ? $0.micros > $1.micros : $0.stored.id > $1.stored.id }
            .prefix(limit)
            .map { r in
                var report = r.stored
                if !includeStack { report.stack = nil }
                return (report, r.micros)
            }
        }

        /// Every key, whatever `maxSeries` (the controller keeps the series that fit).
        func stats(
            project: Int64, window: TimeWindow, unit: StatsInterval, groupBy: StatsGrouping, maxSeries: Int, environments: [String]
        ) async throws
            -> [(t: Date, key: String?, n: Int64)]
        {
            var out: [Date: [String?: Int64]] = [:]
            for r in matching(project, window, GroupFilters(environments: environments)) {
                let key: String? =
                    switch groupBy {
                    case .kind: r.stored.kind
                    case .version: r.stored.app.version
                    case .environment: r.stored.environment
                    case .none, .fatal: nil
                    }
                out[TimeWindow.floor(r.stored.timestamp, unit.seconds), default: [:]][key, default: 0] += 1
            }
            return out.flatMap { t, keys in keys.map { (t: t, key: $0.key, n: $0.value) } }
        }

        func fatalStats(
            project: Int64, window: TimeWindow, unit: StatsInterval, environments: [String]
        ) async throws -> [(t: Date, key: String?, n: Int64)] {
            var out: [Date: (fatal: Int64, all: Int64)] = [:]
            for r in matching(project, window, GroupFilters(environments: environments)) {
                let t = TimeWindow.floor(r.stored.timestamp, unit.seconds)
                out[t, default: (0, 0)].all += 1
                if r.stored.fatal == true { out[t]!.fatal += 1 }
            }
            return out.flatMap { t, n in [(t: t, key: "fatal", n: n.fatal), (t: t, key: "nonFatal", n: n.all - n.fatal)] }
        }

        func groupTrends(
            project: Int64, ids: [Int64], window: TimeWindow, unit: StatsInterval, filters: GroupFilters
        ) async throws
            -> [Int64: [Date: Int64]]
        {
            logRowRead("groupTrends")
            var out: [Int64: [Date: Int64]] = [:]
            for r in matching(project, window, filters) where ids.contains(r.group) {
                out[r.group, default: [:]][TimeWindow.floor(r.stored.timestamp, unit.seconds), default: 0] += 1
            }
            return out
        }
    }
}
