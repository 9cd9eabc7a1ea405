/// A set of grouping rules. Stored with every crash group and on every project: a group
/// keeps the version it was made with, and a report is grouped by its project's current
/// version. A version never changes once released (v1 is frozen); new rules are a new version.
public enum GroupingVersion: String, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    /// The contract's original rules: reason only, plus the first 3 frames for `signal`
    /// and `exception`. Kept for projects created before v2 (and on request).
    case v1
    /// Stack-aware for every kind: the first 3 app frames past the crash machinery, and
    /// the normalizer fixes listed in `docs/grouping.md`.
    case v2

    /// The version of a project created without `--grouping`.
    public static let newProjectDefault = GroupingVersion.v2

    public var description: String { rawValue }

    /// The normalizer's rules for this version.
    var normalizerRules: NormalizerRules {
        switch self {
        case .v1: return .v1
        case .v2: return .v2
        }
    }
}

/// What a grouping version adds to v1's normalization (every rule of v1 still applies).
struct NormalizerRules: Sendable {
    /// `0x0` (and `0x0000...`) is an address like any other: `0x?`. In v1 a null pointer
    /// stays `0x0`, so `at 0x0` and `at 0x1a2b3c` were two groups for one bug.
    var nullIsAddress: Bool
    /// A sign before a number that becomes `<n>` goes too: `(-3)` and `(49)` are `(<n>)`.
    var negativeNumbers: Bool

    static let v1 = NormalizerRules(nullIsAddress: false, negativeNumbers: false)
    static let v2 = NormalizerRules(nullIsAddress: true, negativeNumbers: true)
}
