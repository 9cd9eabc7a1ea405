import ArgumentParser
import CrashGrouping
import CrashWire
import Foundation
import SeededRandom

/// `crash-bench grouping`: grouping quality on a generated catalogue of crash sites.
///
/// Builds `--sites` distinct crash sites (`CrashCatalogue`) and `--reports` occurrences of
/// them (a Zipf-like spread, every site at least `--min-per-site` times), groups every
/// occurrence with each grouping version, and prints, per version:
/// - groups made (the ideal is one per site);
/// - sites split: sites whose occurrences landed in more than one group (target 0);
/// - groups holding more than one site, and their share of all groups (target <= 2 %);
/// - sites merged: sites that share a group with another site.
/// With `--show N`, the largest merged groups and split sites are listed.
struct GroupingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grouping",
        abstract: "Groups made, sites merged and sites split for each grouping version, on a generated catalogue."
    )

    @Option(help: "Distinct crash sites in the catalogue.") var sites: Int = 300
    @Option(help: "Reports (occurrences) to generate.") var reports: Int = 30_000
    @Option(help: "Occurrences of every site at least.") var minPerSite: Int = 5
    @Option(help: "Seed of the catalogue and the occurrences.") var seed: UInt64 = 18
    @Option(help: "List this many merged groups and split sites per version.") var show: Int = 0
    @Flag(help: "Print one generated occurrence per platform, and exit.") var examples = false

    func validate() throws {
        guard sites >= 1, reports >= sites, minPerSite >= 1, minPerSite * sites <= reports else {
            throw ValidationError("need 1 <= sites, sites * min-per-site <= reports")
        }
    }

    func run() async throws {
        let catalogue = CrashCatalogue(sites: sites, seed: seed)
        var rng = SplitMix64(seed: seed &+ 1)
        if examples {
            for platform in CrashCatalogue.Platform.allCases {
                guard let site = catalogue.sites.first(where: { $0.platform == platform }) else { continue }
                let o = catalogue.occurrence(of: site, &rng)
                print("== \(platform) (site \(site.id), kind \(o.kind.rawValue))\n\(o.reason)")
                for frame in o.stack { print("  \(frame)") }
            }
            return
        }
        let zipf = Zipf(count: sites, hottest: 0.05)
        var picks: [Int] = []
        for s in 0..<sites { picks += Array(repeating: s, count: minPerSite) }
        while picks.count < reports { picks.append(zipf.sample(&rng)) }
        let occurrences = picks.map { catalogue.occurrence(of: catalogue.sites[$0], &rng) }
        let frames = occurrences.reduce(0) { $0 + $1.stack.count }
        print("catalogue: \(sites) sites, \(occurrences.count) reports, \(frames / occurrences.count) frames per stack on average (seed \(seed))")
        print(
            "platforms: "
                + CrashCatalogue.Platform.allCases.map { p in "\(p.rawValue) \(catalogue.sites.filter { $0.platform == p }.count)" }.joined(
                    separator: ", "))
        for version in GroupingVersion.allCases {
            var groupsOfSite: [Int: Set<String>] = [:]
            var sitesOfGroup: [String: Set<Int>] = [:]
            var titles: [String: String] = [:]
            for o in occurrences {
                let signature = Grouping.signature(
                    kind: o.kind, reason: o.reason, stack: o.stack, fingerprint: nil, version: version)
                groupsOfSite[o.site, default: []].insert(signature.hash)
                sitesOfGroup[signature.hash, default: []].insert(o.site)
                titles[signature.hash] = signature.title
            }
            let split = groupsOfSite.filter { $0.value.count > 1 }
            let mixed = sitesOfGroup.filter { $0.value.count > 1 }
            let merged = Set(mixed.values.flatMap { $0 })
            let share = 100 * Double(mixed.count) / Double(sitesOfGroup.count)
            print(
                String(
                    format:
                        "%@: %d groups for %d sites; sites split: %d; groups holding more than one site: %d (%.1f %%, largest %d sites); sites merged: %d",
                    version.rawValue, sitesOfGroup.count, sites, split.count, mixed.count, share,
                    mixed.values.map(\.count).max() ?? 1, merged.count))
            for (hash, members) in mixed.sorted(by: { $0.value.count > $1.value.count }).prefix(show) {
                print(
                    "  merged \(members.count) sites (\(members.sorted().prefix(8).map(String.init).joined(separator: ","))): \(titles[hash] ?? "")")
            }
            for (site, groups) in split.sorted(by: { $0.value.count > $1.value.count }).prefix(show) {
                print("  split site \(site) (\(catalogue.sites[site].platform)) into \(groups.count) groups: \(catalogue.sites[site].reason)")
            }
        }
    }
}
