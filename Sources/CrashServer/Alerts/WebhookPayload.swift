import CrashWire
import Foundation

/// The bodies a webhook receives.
enum WebhookPayload {
    /// `json`: `{"event", "project", "group", "deliveredAt"}`, the group as in the crash
    /// list (counts over the last 7 days). `slack`: `{"text"}` naming the event, the title,
    /// the count and the dashboard's page of the group.
    static func render(
        format: WebhookFormat, event: String, project: String, group: GroupBody, publicURL: String, deliveredAt: Date,
        rule: AlertRuleRef? = nil
    ) throws -> [UInt8] {
        try encode(
            format, JSONBody(event: event, project: project, group: group, deliveredAt: deliveredAt, rule: rule),
            slack: slackText(event: event, project: project, group: group, publicURL: publicURL))
    }

    /// Every body, `json` or `slack`, through one encoder.
    private static func encode(_ format: WebhookFormat, _ json: JSONBody, slack: @autoclosure () -> String) throws -> [UInt8] {
        let encoder = JSONEncoder.crashWire()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        switch format {
        case .json: return Array(try encoder.encode(json))
        case .slack: return Array(try encoder.encode(["text": slack()]))
        }
    }

    /// The `json` body: a group's event names the group, a release's the release.
    private struct JSONBody: Encodable {
        var event: String
        var project: String
        var group: GroupBody?
        var release: ReleaseBody?
        var deliveredAt: Date
        /// The alert rule that fired (absent for an `events` subscription).
        var rule: AlertRuleRef?
    }

    /// A `release.crashFreeSessions` firing's body. `json`: `{"event", "project", "release":
    /// {"version", "crashFreeSessions", "sessions", "crashedSessions", "windowMinutes", "url"},
    /// "deliveredAt", "rule"}`, the counts over the rule's window as the delivery is sent.
    /// `slack`: `{"text"}` naming the threshold, the version, its rate and the release's page.
    static func renderRelease(
        format: WebhookFormat, event: String, project: String, release: ReleaseBody, below: Double?, deliveredAt: Date,
        rule: AlertRuleRef?
    ) throws -> [UInt8] {
        let threshold = below.map { " below \(percent($0))" } ?? ""
        return try encode(
            format, JSONBody(event: event, project: project, release: release, deliveredAt: deliveredAt, rule: rule),
            slack: "Crash-free sessions\(threshold) in \(project): version \(release.version) at \(percent(release.crashFreeSessions)), "
                + "\(release.crashedSessions) of \(release.sessions) sessions crashed in \(release.windowMinutes) minutes, \(release.url)")
    }

    /// A version's crash-free sessions in a rule's window, as a release firing's body names it.
    struct ReleaseBody: Encodable, Sendable, Equatable {
        var version: String
        var crashFreeSessions: Double
        var sessions: Int64
        var crashedSessions: Int64
        var windowMinutes: Int
        /// The dashboard's page of the release.
        var url: String
    }

    /// `0.9512` as `95.12 %`.
    static func percent(_ rate: Double) -> String {
        String(format: "%.2f %%", rate * 100)
    }

    /// The dashboard's page of a release: `{publicURL}/projects/{project}/releases/{version}`.
    static func releaseURL(publicURL: String, project: String, version: String) -> String {
        var base = publicURL
        while base.hasSuffix("/") { base.removeLast() }
        let path = version.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(["/"])) ?? version
        return "\(base)/projects/\(project)/releases/\(path)"
    }

    /// The dashboard's page of a group: `{publicURL}/projects/{project}/crashes/{id}`.
    static func groupURL(publicURL: String, project: String, group: String) -> String {
        var base = publicURL
        while base.hasSuffix("/") { base.removeLast() }
        return "\(base)/projects/\(project)/crashes/\(group)"
    }

    /// One message, e.g. "New crash in demo: `-[__NSArrayI objectAtIndex:]: index <n> beyond
    /// bounds` (container, fatal), 3 reports in 7 days, https://crash.example.com/projects/demo/crashes/42".
    /// The title is escaped as Slack asks (`&`, `<`, `>`), which Mattermost and Discord accept
    /// too; the link is a bare URL, which all three turn into a link.
    static func slackText(event: String, project: String, group: GroupBody, publicURL: String) -> String {
        let what: String
        switch WebhookEvent(rawValue: event) {
        case .groupNew: what = "New crash"
        case .groupRegressed: what = "Regressed crash"
        case .groupSpike: what = "Crash spiking"
        case .groupReappeared: what = "Reappeared crash"
        case nil: what = AlertEventWords.words(event)
        }
        var title = group.title
            .replacingOccurrences(of: "&", with: "&amp;")
            .replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "`", with: "'")
        if title.isEmpty { title = "(no title)" }
        let fatal = group.fatal ? ", fatal" : ""
        let reports = group.count == 1 ? "1 report" : "\(group.count) reports"
        let link = groupURL(publicURL: publicURL, project: project, group: group.id)
        return "\(what) in \(project): `\(title)` (\(group.kind)\(fatal)), \(reports) in 7 days, \(link)"
    }
}
