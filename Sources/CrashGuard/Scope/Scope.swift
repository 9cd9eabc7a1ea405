import CCrashCapture
import CrashWire
import Foundation

/// What the app tells CrashGuard about the current user and state: an install or user id,
/// tags, context entries and a bounded ring of breadcrumbs. Every report (crash records
/// included) carries it in `context`:
///
/// | key | value |
/// | --- | --- |
/// | `user.id` | ``CrashGuard/setUser(id:)`` |
/// | `tag.<name>` | ``CrashGuard/setTag(_:_:)`` |
/// | `<name>` | ``CrashGuard/setContext(_:_:)`` |
/// | `breadcrumb.00` … | newest first: `<ISO time> [<category>] <message>` |
///
/// A report's own entries win over the scope's; the scope only fills what is left of the
/// contract's 64 entries, in the order of the table (so the newest breadcrumbs are kept).
/// Thread-safe. Every change is also copied into memory the crash handler reads, so a
/// crash record has the scope as it was at the crash, without the handler allocating.
final class Scope: @unchecked Sendable {
    /// One breadcrumb.
    struct Breadcrumb: Sendable, Equatable {
        var timestamp: Date
        var category: String?
        var message: String
    }

    /// Breadcrumbs kept (the oldest is forgotten first).
    static let maxBreadcrumbs = 20

    private let lock = NSLock()
    private var userID: String?
    private var tags: [String: String] = [:]
    private var extra: [String: String] = [:]
    private var breadcrumbs: [Breadcrumb] = []
    private var nextBreadcrumb = 0

    /// The process-wide scope.
    static let shared = Scope()

    func setUser(id: String?) { change { $0.userID = id } }
    func setTag(_ name: String, _ value: String?) { change { $0.tags[name] = value } }
    func setContext(_ name: String, _ value: String?) { change { $0.extra[name] = value } }

    func addBreadcrumb(_ message: String, category: String?, timestamp: Date) {
        let crumb = Breadcrumb(timestamp: timestamp, category: category, message: message)
        change { scope in
            if scope.breadcrumbs.count < Self.maxBreadcrumbs {
                scope.breadcrumbs.append(crumb)
            } else {
                scope.breadcrumbs[scope.nextBreadcrumb] = crumb
            }
            scope.nextBreadcrumb = (scope.nextBreadcrumb + 1) % Self.maxBreadcrumbs
        }
    }

    /// Forgets everything (tests; an app's logout).
    func clear() {
        change { scope in
            scope.userID = nil
            scope.tags = [:]
            scope.extra = [:]
            scope.breadcrumbs = []
            scope.nextBreadcrumb = 0
        }
    }

    /// The entries in priority order: user, tags, context, breadcrumbs newest first.
    func entries() -> [(key: String, value: String)] {
        lock.withLock { entriesLocked() }
    }

    /// `context` with the scope's entries added where the report has none under that key,
    /// within the contract's limits.
    func apply(to context: [String: String]?) -> [String: String]? {
        let entries = self.entries()
        guard !entries.isEmpty else { return context }
        var result = context ?? [:]
        for (key, value) in entries where result.count < ReportLimits.maxContextEntries {
            let key = Report.clamp(key, ReportLimits.contextKeyBytes)
            if result[key] == nil { result[key] = Report.clamp(value, ReportLimits.contextValueBytes) }
        }
        return result
    }

    private func change(_ body: (Scope) -> Void) {
        lock.withLock {
            body(self)
            publishLocked()
        }
    }

    private func entriesLocked() -> [(key: String, value: String)] {
        var entries: [(key: String, value: String)] = []
        if let userID { entries.append(("user.id", userID)) }
        for name in tags.keys.sorted() { entries.append(("tag.\(name)", tags[name] ?? "")) }
        for name in extra.keys.sorted() { entries.append((name, extra[name] ?? "")) }
        // Newest first: the ring's write position minus one, backwards.
        let count = breadcrumbs.count
        for i in 0..<count {
            let crumb = breadcrumbs[(nextBreadcrumb - 1 - i + 2 * count) % count]
            let category = crumb.category.map { "[\($0)] " } ?? ""
            let time = crumb.timestamp.formatted(.iso8601)
            entries.append((String(format: "breadcrumb.%02d", i), "\(time) \(category)\(crumb.message)"))
        }
        return entries
    }

    /// Copies the entries, as `key\tvalue` lines, where the crash handler reads them.
    private func publishLocked() {
        var text = ""
        for (key, value) in entriesLocked() {
            let clean = { (s: String) in
                Report.clamp(s, ReportLimits.contextValueBytes).replacingOccurrences(of: "\n", with: " ")
                    .replacingOccurrences(of: "\t", with: " ")
            }
            text += clean(Report.clamp(key, ReportLimits.contextKeyBytes)) + "\t" + clean(value) + "\n"
        }
        text.utf8CString.withUnsafeBufferPointer { ccrash_set_scope($0.baseAddress, $0.count - 1) }
    }
}

extension CrashGuard {
    /// Sets the user id (or an install id of your own) carried by every report as
    /// `context["user.id"]`; `nil` removes it.
    public static func setUser(id: String?) { Scope.shared.setUser(id: id) }

    /// Sets a tag carried by every report as `context["tag.<name>"]`; `nil` removes it.
    public static func setTag(_ name: String, _ value: String?) { Scope.shared.setTag(name, value) }

    /// Sets a context entry carried by every report as `context[name]` (a report's own
    /// entry of that name wins); `nil` removes it.
    public static func setContext(_ name: String, _ value: String?) { Scope.shared.setContext(name, value) }

    /// Adds a breadcrumb: the last 20 travel with every report (crashes included) as
    /// `context["breadcrumb.00"]` (newest) onwards.
    public static func addBreadcrumb(_ message: String, category: String? = nil) {
        Scope.shared.addBreadcrumb(message, category: category, timestamp: Date())
    }

    /// Forgets the user, tags, context and breadcrumbs.
    public static func clearScope() { Scope.shared.clear() }
}
