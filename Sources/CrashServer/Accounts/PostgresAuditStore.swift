import Foundation
import Logging
import PostgresNIO

/// ``AuditStore`` in the `audit_log` table.
struct PostgresAuditStore: PrimaryClientStore, AuditStore {
    let client: PostgresClient
    let logger: Logger

    func append(action: String, by actor: Principal, project: String?, target: String?, address: String?) async throws {
        try await client.query(
            """
            INSERT INTO audit_log (actor_type, actor_id, actor_name, action, project_id, project, target, address)
            VALUES (\(actor.kind.rawValue), \(actor.id), \(actor.name), \(action),
                    (SELECT id FROM projects WHERE slug = \(project)), \(project), \(target), \(address))
            """, logger: logger)
    }

    func entries(_ q: AuditQuery) async throws -> [AuditEntry] {
        let rows = try await client.query(
            """
            SELECT id, at, actor_type, actor_id, actor_name, action, project, target, address FROM audit_log
            WHERE (\(q.project)::bigint IS NULL OR project_id = \(q.project))
              AND (\(q.projects)::bigint[] IS NULL OR project_id = ANY(\(q.projects)))
              AND (\(q.actor)::text IS NULL OR actor_name = \(q.actor) OR actor_id = \(q.actor))
              AND (\(q.from)::timestamptz IS NULL OR at >= \(q.from))
              AND (\(q.to)::timestamptz IS NULL OR at < \(q.to))
              AND (\(q.before)::bigint IS NULL OR id < \(q.before))
            ORDER BY id DESC LIMIT \(q.limit)
            """, logger: logger)
        var out: [AuditEntry] = []
        for try await (id, at, type, actorID, name, action, project, target, address) in rows.decode(
            (Int64, Date, String, String?, String, String, String?, String?, String?).self)
        {
            out.append(
                AuditEntry(
                    id: id, at: at, actor: .init(type: Principal.Kind(rawValue: type) ?? .system, id: actorID, name: name),
                    action: action, project: project, target: target, address: address))
        }
        return out
    }
}

/// Records what was changed, by whom: `AuditLog.record("webhook.create", by: context.principal,
/// project: project, target: id, address: context.clientAddress)`. A failure to record is
/// logged, never the caller's error: the change itself already happened.
struct AuditLog: Sendable {
    let store: any AuditStore
    let logger: Logger

    init(store: any AuditStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    init(database: CrashDatabase, logger: Logger) {
        self.init(store: PostgresAuditStore(database: database), logger: logger)
    }

    func record(_ action: String, by actor: Principal, project: ProjectRef? = nil, target: String? = nil, address: String? = nil) async {
        await record(action, by: actor, projectSlug: project?.slug, target: target, address: address)
    }

    /// The same, naming the project by its slug.
    func record(_ action: String, by actor: Principal, projectSlug: String?, target: String?, address: String?) async {
        do {
            try await store.append(action: action, by: actor, project: projectSlug, target: target, address: address)
        } catch {
            logger.error("audit entry not recorded", metadata: ["audit.action": "\(action)", "error.message": "\(error)"])
        }
    }
}
