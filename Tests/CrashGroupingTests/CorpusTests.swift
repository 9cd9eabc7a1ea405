import CrashGrouping
import CrashWire
import Testing

@Suite("Corpus")
struct CorpusTests {
    @Test("the corpus holds at least 150 hand-written cases, reasons and frames")
    func corpusSize() {
        #expect(Corpus.cases.count >= 150)
        #expect(Corpus.cases.contains { $0.isFrame })
        #expect(Corpus.cases.contains { !$0.isFrame })
        #expect(Corpus.groups.same.count >= 10)
        #expect(Corpus.groups.distinct.count >= 20)
    }

    @Test("each input normalizes to its expected text", arguments: Corpus.cases)
    func normalizes(_ c: CorpusCase) {
        let got = c.isFrame ? Grouping.normalize(frame: c.input) : Grouping.normalize(reason: c.input)
        #expect(got == c.expected, "\(c)")
    }

    @Test("each expected text is already normalized (idempotence)", arguments: Corpus.cases)
    func expectedIsFixedPoint(_ c: CorpusCase) {
        let again = c.isFrame ? Grouping.normalize(frame: c.expected) : Grouping.normalize(reason: c.expected)
        #expect(again == c.expected, "\(c)")
    }

    @Test("variants of one bug share a signature", arguments: Corpus.groups.same)
    func sameGroup(_ group: SameGroup) {
        #expect(group.variants.count >= 2)
        let signatures = group.signatures(.v1)
        #expect(Set(signatures).count == 1, "\(group.name)")
    }

    @Test("different bugs never share a signature", arguments: Corpus.groups.distinct)
    func distinctPair(_ pair: DistinctPair) {
        #expect(pair.a.signature(.v1) != pair.b.signature(.v1), "\(pair.name)")
    }

    @Test("no two corpus reasons with different expected texts share a signature")
    func corpusReasonsAreDistinct() {
        var seen: [String: String] = [:]
        for c in Corpus.cases where !c.isFrame {
            let hash = Grouping.signature(kind: .custom, reason: c.input, stack: nil, fingerprint: nil, version: .v1).hash
            if let previous = seen[hash] {
                #expect(previous == c.expected, "\(c) collides")
            }
            seen[hash] = c.expected
        }
    }
}

@Suite("Corpus v2")
struct CorpusV2Tests {
    @Test("the v2 corpus has its cases, groups of realistic stacks and distinct sites")
    func size() {
        #expect(Corpus.casesV2.count >= 10)
        #expect(Corpus.groupsV2.same.count >= 5)
        #expect(Corpus.groupsV2.distinct.count >= 5)
    }

    @Test("every v1 case gives its v1 text under v2, unless normalize-v2.txt says otherwise", arguments: Corpus.cases)
    func v1CasesUnderV2(_ c: CorpusCase) {
        let override = Corpus.casesV2.first { $0.input == c.input && $0.isFrame == c.isFrame }
        let expected = override?.expected ?? c.expected
        let got = c.isFrame ? Grouping.normalize(frame: c.input, version: .v2) : Grouping.normalize(reason: c.input, version: .v2)
        #expect(got == expected, "\(c)")
    }

    @Test("each v2 case normalizes to its expected text, a fixed point", arguments: Corpus.casesV2)
    func v2Cases(_ c: CorpusCase) {
        let normalize = { (text: String) in
            c.isFrame ? Grouping.normalize(frame: text, version: .v2) : Grouping.normalize(reason: text, version: .v2)
        }
        #expect(normalize(c.input) == c.expected, "\(c)")
        #expect(normalize(c.expected) == c.expected, "\(c)")
    }

    @Test("v2: variants of one bug share a signature", arguments: Corpus.groupsV2.same)
    func sameGroup(_ group: SameGroup) {
        let signatures = group.signatures(.v2)
        #expect(group.variants.count >= 2 && Set(signatures).count == 1, "\(group.name)")
    }

    @Test("v2: different sites never share a signature", arguments: Corpus.groupsV2.distinct)
    func distinctPair(_ pair: DistinctPair) {
        #expect(pair.a.signature(.v2) != pair.b.signature(.v2), "\(pair.name)")
    }

    /// v2's normalizer only merges what v1's kept apart (`0x0`, signs), so a v1 group decided
    /// by its reason stays one group. Groups with stacks may split on purpose: v2 reads the
    /// app frames of every kind (see docs/grouping.md, "v1's known gaps").
    @Test(
        "v1's groups of variants decided by their reason stay together under v2",
        arguments: Corpus.groups.same.filter { $0.variants.allSatisfy { ($0.stack ?? []).isEmpty } })
    func v1GroupsHoldInV2(_ group: SameGroup) {
        let signatures = group.signatures(.v2)
        #expect(Set(signatures).count == 1, "\(group.name)")
    }
}
