import CrashWire
import Foundation
import Hummingbird

/// The query string of a request, parsed with 400s that name the bad parameter.
struct QueryParameters {
    let values: [String: String]
    /// Every value of each parameter, in order (`environment` may be repeated).
    let all: [String: [String]]

    init(_ request: Request) {
        var values: [String: String] = [:]
        var all: [String: [String]] = [:]
        for (key, value) in request.uri.queryParameters {
            values[String(key)] = String(value)
            all[String(key), default: []].append(String(value))
        }
        self.values = values
        self.all = all
    }

    init(_ values: [String: String]) {
        self.values = values
        all = values.mapValues { [$0] }
    }

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
        filters.environments = try environments()
        filters.search = try search()
        return filters
    }

    /// `environment=` (repeatable: any of them), each 1 to 64 bytes without control
    /// characters; a 400 naming `environment` otherwise. Empty when absent.
    func environments() throws -> [String] {
        var names: [String] = []
        for name in all["environment"] ?? [] {
            if let problem = Report.environmentError(name) { throw APIError.badRequest(problem) }
            if !names.contains(name) { names.append(name) }
        }
        return names
    }

    /// `q`, the search language (``SearchQuery``); a 400 naming `q` when it cannot be read.
    func search() throws -> SearchQuery {
        do {
            return try SearchQuery.parse(values["q"])
        } catch {
            throw APIError.badRequest("q: \(error.message)")
        }
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
