import Foundation

/// A person who signs in (accounts.md): unique by e-mail (case-insensitive), a server admin
/// or not, disabled or not.
public struct User: Sendable, Hashable, Codable {
    /// The database id.
    public var id: Int64
    /// The e-mail address, as it was first given.
    public var email: String
    /// The name shown in activity and the audit log (the e-mail when empty).
    public var name: String
    /// A server admin sees and manages every project.
    public var isAdmin: Bool
    /// A disabled user cannot sign in, and has no sessions or tokens.
    public var disabled: Bool
    /// Whether a password is set (a user made for single sign-on may have none).
    public var hasPassword: Bool

    /// The principal requests made by this user carry.
    public var principal: Principal { Principal(kind: .user, id: String(id), name: name.isEmpty ? email : name) }
}

/// A member's role on one project; each includes what the ones before it may do.
public enum ProjectRole: String, Sendable, Hashable, Codable, CaseIterable, Comparable {
    /// Reads everything of the project.
    case viewer
    /// Also triages: status, assignee, snooze, merge, comments.
    case member
    /// Also webhooks, alert rules, settings, debug files, members and key rotation.
    case admin

    private var rank: Int {
        switch self {
        case .viewer: 0
        case .member: 1
        case .admin: 2
        }
    }

    public static func < (a: ProjectRole, b: ProjectRole) -> Bool { a.rank < b.rank }

    /// The project scopes this role grants (a token's scopes are cut to them at each use).
    public var scopes: Set<TokenScope> {
        switch self {
        case .viewer: [.projectRead]
        case .member: [.projectRead, .projectTriage]
        case .admin: [.projectRead, .projectTriage, .projectAdmin, .debugFilesWrite]
        }
    }
}

/// What an API token may do (accounts.md). Every route declares the one it needs
/// (``RouteScopes``).
public enum TokenScope: String, Sendable, Hashable, Codable, CaseIterable {
    /// Queries, dashboard pages, releases.
    case projectRead = "project:read"
    /// Triage: status, assignee, snooze, merge, comments.
    case projectTriage = "project:triage"
    /// Webhooks, alert rules, settings, members, key rotation.
    case projectAdmin = "project:admin"
    /// Debug-file uploads (REST and `sentry-cli`).
    case debugFilesWrite = "debug-files:write"
    /// Creating and revoking the user's tokens.
    case tokensWrite = "tokens:write"

    /// The role a signed-in user needs on a project to use this scope there.
    public var role: ProjectRole {
        switch self {
        case .projectRead: .viewer
        case .projectTriage: .member
        case .projectAdmin, .debugFilesWrite, .tokensWrite: .admin
        }
    }
}
