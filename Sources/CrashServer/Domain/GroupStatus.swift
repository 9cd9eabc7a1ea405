/// A crash group's triage status (`regressed`: resolved, then seen again in a later version).
enum GroupStatus: String, Codable, Sendable, CaseIterable {
    case open, resolved, ignored, regressed
}
