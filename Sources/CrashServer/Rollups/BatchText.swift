import CrashWire

/// The text values an aggregator cycle's rollup rows are keyed by (app ids, versions, OS names,
/// models, kinds, facet names), each once, as ranks: small integers in the strings' order.
///
/// The rollup rows are added up in dictionaries and written sorted by key. With the strings in
/// the keys, a report's strings were hashed some 30 times and compared again by every sort
/// (docs/performance.md). Here each value is hashed once per pending row that holds it
/// (``RollupFactTable``) and sorted once per cycle; the keys hold ranks, which hash and compare
/// as integers and sort exactly as the strings do.
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
    /// The rank of each of the table's text ids.
    private let rankOfID: [Int32]
    /// The ranks of ``fixed``, in its order.
    private let fixedRanks: [Int32]
    private let table: RollupFactTable

    /// Values every batch's keys may use besides the reports' own: the all-versions version
    /// and the facet names.
    static let fixed = ["", "app", "version", "os", "environment"]

    /// The texts of the reports `stored`, of any group.
    init(_ stored: [IngestItem]) {
        self.init(facts: stored.map { RollupFact($0, group: 0) })
    }

    init(facts: [RollupFact]) {
        var table = RollupFactTable()
        for fact in facts { table.append(fact) }
        self.init(table)
    }

    /// The texts of `table`'s reports: its distinct texts sorted once, each report's ids mapped
    /// to ranks through an array.
    init(_ table: RollupFactTable) {
        let texts = table.texts
        let order = texts.indices.sorted { texts[$0] < texts[$1] }
        var rankOfID = [Int32](repeating: 0, count: texts.count)
        for (rank, id) in order.enumerated() { rankOfID[id] = Int32(rank) }
        strings = order.map { texts[$0] }
        reports = table.reports.map {
            Ranks(
                app: rankOfID[Int($0.app)], version: rankOfID[Int($0.version)], os: rankOfID[Int($0.os)],
                model: rankOfID[Int($0.model)], kind: rankOfID[Int($0.kind)], environment: rankOfID[Int($0.environment)])
        }
        self.rankOfID = rankOfID
        fixedRanks = BatchText.fixed.map { rankOfID[Int(table.id(of: $0)!)] }
        self.table = table
    }

    subscript(rank: Int32) -> String { strings[Int(rank)] }

    /// The rank of `value`; nil when no report of the batch has it.
    func rank(of value: String) -> Int32? { table.id(of: value).map { rankOfID[Int($0)] } }

    /// The ranks of the facet names and the all-versions version (``fixed``).
    var all: Int32 { fixedRanks[0] }
    var appFacet: Int32 { fixedRanks[1] }
    var versionFacet: Int32 { fixedRanks[2] }
    var osFacet: Int32 { fixedRanks[3] }
    var environmentFacet: Int32 { fixedRanks[4] }
}
