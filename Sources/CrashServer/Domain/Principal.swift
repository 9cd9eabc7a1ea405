/// Who makes a request: the party that activity entries and the audit log name.
///
/// Read authentication sets it on ``CrashRequestContext/principal``: the project read token
/// today, a signed-in user or one of a user's API tokens once accounts authenticate the
/// request. Changes the server makes by itself (regressions, reappearing snoozed groups)
/// are made by ``system``.
public struct Principal: Sendable, Hashable, Codable {
    /// The kinds of party, as the audit log's `actor.type` spells them.
    public enum Kind: String, Sendable, Hashable, Codable {
        case user, token, readToken, system
    }

    /// What kind of party this is.
    public var kind: Kind
    /// The user's or token's id; nil for the read token and the server itself.
    public var id: String?
    /// The name activity entries show (`"read token"`, `"system"`, a user's name or e-mail).
    public var name: String

    /// Creates a principal.
    public init(kind: Kind, id: String?, name: String) {
        self.kind = kind
        self.id = id
        self.name = name
    }

    /// A project's read token (the contract names it `"read token"` in activity).
    public static let readToken = Principal(kind: .readToken, id: nil, name: "read token")

    /// The server itself, for automatic changes.
    public static let system = Principal(kind: .system, id: nil, name: "system")
}
