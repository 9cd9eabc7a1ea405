import CrashWire
import Foundation
import Testing

@testable import CrashServer

/// The search language (`q=`, triage.md "Search") as a table: what each text parses to, and
/// which texts are refused with a message that says why.
@Suite struct SearchQueryTests {
    typealias Q = SearchQuery

    static func g(_ term: Q.GroupTerm, not: Bool = false) -> Q.Term<Q.GroupTerm> { .init(negated: not, value: term) }
    static func r(_ term: Q.ReportTerm, not: Bool = false) -> Q.Term<Q.ReportTerm> { .init(negated: not, value: term) }
    static let date = RFC3339.parse("2026-11-20T10:00:00Z")!

    static let parsed: [(String, [Q.Term<Q.GroupTerm>], [Q.Term<Q.ReportTerm>])] = [
        ("", [], []),
        ("   \t ", [], []),
        ("is:open", [g(.state(.open))], []),
        ("!is:resolved", [g(.state(.resolved), not: true)], []),
        ("is:ignored is:snoozed is:regressed", [g(.state(.ignored)), g(.state(.snoozed)), g(.state(.regressed))], []),
        ("is:assigned !is:unassigned", [g(.state(.assigned)), g(.state(.unassigned), not: true)], []),
        ("assigned:Ana@Example.com", [g(.assignee("Ana@Example.com"))], []),
        ("kind:kvo", [g(.kind(.kvo))], []),
        ("firstSeen:-24h", [g(.firstSeen(.greaterOrEqual, .ago(seconds: 86_400, text: "-24h")))], []),
        ("firstSeen:+24h", [g(.firstSeen(.lessOrEqual, .ago(seconds: 86_400, text: "-24h")))], []),
        ("lastSeen:>-30m", [g(.lastSeen(.greater, .ago(seconds: 1_800, text: "-30m")))], []),
        ("lastSeen:<=-2w", [g(.lastSeen(.lessOrEqual, .ago(seconds: 1_209_600, text: "-2w")))], []),
        ("firstSeen:<-1d", [g(.firstSeen(.less, .ago(seconds: 86_400, text: "-1d")))], []),
        (
            "firstSeen:>=2026-11-20T10:00:00Z",
            [g(.firstSeen(.greaterOrEqual, .absolute(date, text: "2026-11-20T10:00:00Z")))], []
        ),
        ("version:2.4", [], [r(.version("2.4"))]),
        ("release:2.4 !version:2.5", [], [r(.version("2.4")), r(.version("2.5"), not: true)]),
        ("environment:staging os:iOS", [], [r(.environment("staging")), r(.os("iOS"))]),
        ("fatal:true !fatal:false", [], [r(.fatal(true)), r(.fatal(false), not: true)]),
        ("screen:checkout", [], [r(.context(key: "screen", value: "checkout"))]),
        ("screen:\"check out\"", [], [r(.context(key: "screen", value: "check out"))]),
        ("!screen:checkout", [], [r(.context(key: "screen", value: "checkout"), not: true)]),
        ("url:http://x:8080/a", [], [r(.context(key: "url", value: "http://x:8080/a"))]),
        // Keys are case-sensitive: `IS` is a context key, `Version` too.
        ("IS:open Version:1", [], [r(.context(key: "IS", value: "open")), r(.context(key: "Version", value: "1"))]),
        ("objectAtIndex", [g(.title("objectAtIndex"))], []),
        ("\"index 5 beyond\"", [g(.title("index 5 beyond"))], []),
        ("!\"index 5\"", [g(.title("index 5"), not: true)], []),
        ("\"say \\\"hi\\\" \\\\ there\"", [g(.title("say \"hi\" \\ there"))], []),
        ("\"a:b\"", [g(.title("a:b"))], []),
        (":colon", [g(.title(":colon"))], []),
        ("50%_off", [g(.title("50%_off"))], []),
        (
            "is:unassigned release:2.4 screen:checkout \"objectAtIndex\"",
            [g(.state(.unassigned)), g(.title("objectAtIndex"))],
            [r(.version("2.4")), r(.context(key: "screen", value: "checkout"))]
        ),
    ]

    @Test(arguments: parsed)
    func parses(_ text: String, _ group: [Q.Term<Q.GroupTerm>], _ report: [Q.Term<Q.ReportTerm>]) throws {
        let query = try Q.parse(text)
        #expect(query.groupTerms == group)
        #expect(query.reportTerms == report)
        // Written back, it reads the same.
        #expect(try Q.parse(query.text) == query)
    }

    static let refused: [(String, String)] = [
        ("is:unknown", "is:unknown: not one of"),
        ("is:Open", "is:Open: not one of"),
        ("kind:crash", "kind:crash: not one of"),
        ("fatal:yes", "fatal:yes: must be true or false"),
        ("fatal:TRUE", "fatal:TRUE: must be true or false"),
        ("firstSeen:yesterday", "needs an operator"),
        ("firstSeen:2026-11-20T10:00:00Z", "needs an operator"),
        ("firstSeen:=-24h", "the operator must be"),
        ("lastSeen:!-24h", "the operator must be"),
        ("lastSeen:>-24x", "the time must be RFC 3339"),
        ("lastSeen:>-h", "the time must be RFC 3339"),
        ("lastSeen:>+24h", "the time must be RFC 3339"),
        ("lastSeen:>2026-13-40", "the time must be RFC 3339"),
        ("firstSeen:-99999999999w", "the time must be RFC 3339"),
        ("version:", "version: needs a value"),
        ("screen:\"\"", "screen: needs a value"),
        ("!", "a lone !"),
        ("is:open ! x", "a lone !"),
        ("\"unclosed", "an unclosed quote"),
        ("screen:\"a \\\"b", "an unclosed quote"),
        ("environment:\u{7}", "environment: must not contain control characters"),
        ("environment:" + String(repeating: "e", count: 65), "environment: 65 bytes"),
        (String(repeating: "a", count: 2049), "longer than 2048 bytes"),
    ]

    @Test(arguments: refused)
    func refuses(_ text: String, _ message: String) {
        #expect {
            try Q.parse(text)
        } throws: { error in
            (error as? SearchQueryError)?.message.contains(message) == true
        }
    }

    @Test func statusTermsTurnOffDefaultHiding() throws {
        #expect(try Q.parse("is:snoozed").namesStatus)
        #expect(try Q.parse("!is:open").namesStatus)
        #expect(try !Q.parse("is:assigned kind:kvo crash").namesStatus)
        #expect(try Q.parse(String(repeating: "a ", count: 1024)).groupTerms.count == 1024)
    }

    @Test func reportTermsFoldIntoOnePredicatePerDimension() throws {
        var filters = GroupFilters(version: "2.4")
        filters.environments = ["production", "staging"]
        filters.search = try Q.parse("!version:2.5 os:iOS !environment:dev fatal:true !fatal:true screen:a !tab:b")
        let p = filters.reports
        #expect(p.versions == ["2.4"] && p.notVersions == ["2.5"] && p.oses == ["iOS"])
        #expect(p.anyEnvironment == ["production", "staging"] && p.notEnvironments == ["dev"])
        #expect(p.impossible && p.fatal == false)
        #expect(p.contextKeys == ["screen"] && p.contextValues == ["a"] && p.notContextKeys == ["tab"])
        #expect(filters.level == .reports)
        #expect(try GroupFilters(search: Q.parse("fatal:false")).level == .hours)
        #expect(try GroupFilters(search: Q.parse("version:1 crash is:open")).level == .versions)
        #expect(try GroupFilters(search: Q.parse("environment:staging")).level == .dimensions)
        #expect(GroupFilters(environments: ["staging"]).level == .environments)
        #expect(GroupFilters().level == .versions)
    }
}
