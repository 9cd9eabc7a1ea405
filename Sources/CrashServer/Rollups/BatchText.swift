import CrashWire

/// The text values an aggregator cycle's rollup rows are keyed by (app ids, versions, OS names,
/// models, kinds, facet names), each once, as ranks: small integers in the strings' order.
///
/// The rollup rows are added up in dictionaries and written sorted by key. With the strings in
/// the keys, a report's strings were hashed some 30 times and compared again by every sort
/// (docs/performance.md). Here each value is hashed once per report; the keys hold ranks, which
/// hash and compare as integers and sort exactly as the strings do.
struct BatchText {
    /// The ranks of one report's values.
    struct Ranks {
        var app: Int32
        var version: Int32
        var os: Int32
        var model: Int32
        var kind: Int32
        var environment: Int32
    }

    /// The distinct values in order: `strings[rank]`.
    private(set) var strings: [String]
    /// The ranks of each report's values, in the order of the reports.
    private(set) var reports: [Ranks]
    /// Every value's rank.
    private var ranks: [String: Int32]

    /// Values every batch's keys may use besides the reports' own: the all-versions version
    /// and the facet names.
    static let fixed = ["", "app", "version", "os", "environment"]

    /// The texts of the reports `stored`, of any group.
    init(_ stored: [IngestItem]) {
        self.init(facts: stored.map { RollupFact($0, group: 0) })
    }

    init(facts: [RollupFact]) {
        // First come, first numbered; then renumbered in the strings' order.
        var ids: [String: Int32] = [:]
        var distinct: [String] = []
        func id(_ value: String) -> Int32 {
            let next = Int32(distinct.count)
            // One hash: the default is stored when the value is new.
            let found = Self.read(&ids[value, default: next])
            if found == next { distinct.append(value) }
            return found
        }
        for value in Self.fixed { _ = id(value) }
        var reports: [Ranks] = []
        reports.reserveCapacity(facts.count)
        for r in facts {
            reports.append(
                Ranks(
                    app: id(r.app), version: id(r.version), os: id(r.os), model: id(r.model), kind: id(r.kind),
                    environment: id(r.environment)))
        }
        let order = distinct.indices.sorted { distinct[$0] < distinct[$1] }
        var rankOfID = [Int32](repeating: 0, count: distinct.count)
        for (rank, id) in order.enumerated() { rankOfID[id] = Int32(rank) }
        strings = order.map { distinct[$0] }
        self.reports = reports.map {
            Ranks(
                app: rankOfID[Int($0.app)], version: rankOfID[Int($0.version)], os: rankOfID[Int($0.os)],
                model: rankOfID[Int($0.model)], kind: rankOfID[Int($0.kind)], environment: rankOfID[Int($0.environment)])
        }
        ranks = ids.mapValues { rankOfID[Int($0)] }
    }

    @inline(__always) private static func read(_ value: inout Int32) -> Int32 { value }

    subscript(rank: Int32) -> String { strings[Int(rank)] }

    /// The rank of `value`; nil when no report of the batch has it.
    func rank(of value: String) -> Int32? { ranks[value] }

    /// The ranks of the facet names and the all-versions version.
    var all: Int32 { ranks[""]! }
    var appFacet: Int32 { ranks["app"]! }
    var versionFacet: Int32 { ranks["version"]! }
    var osFacet: Int32 { ranks["os"]! }
    var environmentFacet: Int32 { ranks["environment"]! }
}
