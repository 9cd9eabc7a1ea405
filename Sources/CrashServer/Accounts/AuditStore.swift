import Foundation

/// One entry of the audit log (accounts.md, "Who did what").
struct AuditEntry: Sendable, Encodable, Equatable {
    struct Actor: Sendable, Codable, Equatable {
        var type: Principal.Kind
        var id: String?
        var name: String
    }

    var id: Int64
    var at: Date
    var actor: Actor
    var action: String
    var project: String?
    var target: String?
    var address: String?

    enum CodingKeys: String, CodingKey { case at, actor, action, project, target, address }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(at, forKey: .at)
        try c.encode(actor, forKey: .actor)
        try c.encode(action, forKey: .action)
        try c.encode(project, forKey: .project)
        try c.encode(target, forKey: .target)
        try c.encode(address, forKey: .address)
    }
}

/// Which entries `GET /v1/audit` lists: newest first, after the cursor's entry.
struct AuditQuery: Sendable {
    /// Only this project's entries; nil: every project and the server's own (server admins).
    var project: Int64?
    /// Only entries of these projects (a project admin who asked for no one project).
    var projects: [Int64]?
    /// Only this actor (its name or id).
    var actor: String?
    var from: Date?
    var to: Date?
    /// The id of the last entry of the previous page.
    var before: Int64?
    var limit: Int
}

/// Where the audit log is kept.
protocol AuditStore: Sendable {
    /// Appends an entry; `project` is a slug (an unknown one is kept as text, with no project id).
    func append(action: String, by: Principal, project: String?, target: String?, address: String?) async throws
    func entries(_ query: AuditQuery) async throws -> [AuditEntry]
}
