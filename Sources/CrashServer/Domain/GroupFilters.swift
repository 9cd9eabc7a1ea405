import CrashWire

/// Report-dimension and group filters of the crash list, and the search (`q`) ANDed with them.
struct GroupFilters: Sendable, Hashable {
    var app: String?
    var version: String?
    var os: String?
    var kind: ReportKind?
    /// nil: every status but `ignored` (unless ``search`` names a status).
    var status: GroupStatus?
    /// `environment=` (repeatable): reports of any of these; empty for every environment. With
    /// it a group's `firstSeen`/`lastSeen` are those of its reports in these environments.
    var environments: [String] = []
    /// The parsed `q`.
    var search = SearchQuery()

    /// Whether ignored groups are listed: when `status` is given or `q` names a status.
    var showsIgnored: Bool { status != nil || search.namesStatus }

    /// The report terms and parameters folded per dimension, as the SQL binds them: a report
    /// matches when its version is every one of `versions` and none of `notVersions`, and so on.
    var reports: ReportPredicate { ReportPredicate(self) }

    /// What the rollups can answer for these filters, cheapest first (see ``ReportPredicate``).
    var level: RollupLevel {
        let p = reports
        if !p.contextKeys.isEmpty || !p.notContextKeys.isEmpty { return .reports }
        if p.fatal != nil { return .hours }
        if app == nil && os == nil && search.reportTerms.allSatisfy({ $0.value.isVersion && !$0.negated }) {
            // Only `version` (parameter or terms) narrows the reports: the per-version rollups;
            // with `environment=`, the per-environment ones.
            guard p.versions.count <= 1 else { return .dimensions }
            return environments.isEmpty ? .versions : .environments
        }
        return .dimensions
    }
}

/// The cheapest rollup that holds every report dimension a query filters on.
enum RollupLevel: Sendable, Hashable {
    /// `group_version_hourly`/`daily`: at most one version, nothing else.
    case versions
    /// `group_environment_daily` for whole days; for hours `group_environment_hours`, or
    /// `group_hourly` with a version: `environment=` and at most one version, nothing else.
    case environments
    /// `group_daily` and `group_hourly`: app, version, OS and environment.
    case dimensions
    /// `group_hourly` alone: its `fatal_count` answers `fatal:`.
    case hours
    /// Raw reports over the whole window: `context` terms.
    case reports
}

/// The report terms of ``GroupFilters`` (parameters and `q`), folded per dimension into
/// arrays that SQL binds whatever their number (`app_version = ALL(versions)`).
struct ReportPredicate: Sendable, Hashable {
    var apps: [String] = []
    var versions: [String] = [], notVersions: [String] = []
    var oses: [String] = [], notOSes: [String] = []
    /// Any of these (the `environment=` parameter); empty: any environment.
    var anyEnvironment: [String] = []
    var environments: [String] = [], notEnvironments: [String] = []
    /// nil: fatal or not.
    var fatal: Bool?
    /// Two terms no report can match at once (`fatal:true fatal:false`).
    var impossible = false
    var contextKeys: [String] = [], contextValues: [String] = []
    var notContextKeys: [String] = [], notContextValues: [String] = []

    init(_ f: GroupFilters) {
        apps = f.app.map { [$0] } ?? []
        versions = f.version.map { [$0] } ?? []
        oses = f.os.map { [$0] } ?? []
        anyEnvironment = f.environments
        for term in f.search.reportTerms {
            let no = term.negated
            switch term.value {
            case .version(let v): no ? notVersions.append(v) : versions.append(v)
            case .os(let o): no ? notOSes.append(o) : oses.append(o)
            case .environment(let e): no ? notEnvironments.append(e) : environments.append(e)
            case .fatal(let wanted):
                let value = wanted != no
                if let fatal, fatal != value { impossible = true }
                fatal = value
            case .context(let key, let value):
                if no {
                    notContextKeys.append(key)
                    notContextValues.append(value)
                } else {
                    contextKeys.append(key)
                    contextValues.append(value)
                }
            }
        }
    }
}

extension TimeWindow {
    /// The window's pieces for a query at `level`: days and hours, hours only, or raw reports.
    func plan(for level: RollupLevel) -> Plan {
        switch level {
        case .versions, .environments, .dimensions: plan
        case .hours: hourPlan
        case .reports: reportsPlan
        }
    }
}

extension SearchQuery.ReportTerm {
    var isVersion: Bool { if case .version = self { true } else { false } }
}
