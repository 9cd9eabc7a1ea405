import CrashWire

/// Report-dimension and group filters of the crash list.
struct GroupFilters: Sendable, Hashable {
    var app: String?
    var version: String?
    var os: String?
    var kind: ReportKind?
    /// nil: every status but `ignored`.
    var status: GroupStatus?
}
