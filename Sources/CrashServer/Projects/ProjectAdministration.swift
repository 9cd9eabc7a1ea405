import CrashGrouping
import Foundation
import Logging

/// Creating projects and rotating their keys, for the `crash-server project` commands and
/// `POST /v1/projects` alike (accounts.md): ``PostgresProjectStore`` changes the keys, and the
/// audit log records who did it (`project.create`, `project.rotate-keys`; the command line
/// acts as `system`).
public struct ProjectAdministration: Sendable {
    let store: PostgresProjectStore
    let audit: AuditLog

    /// Projects on `database`.
    public init(database: CrashDatabase, logger: Logger) {
        store = PostgresProjectStore(database: database)
        audit = AuditLog(database: database, logger: logger)
    }

    /// Creates a project with new keys; fails, keeping the old keys, if it exists.
    public func create(
        slug: String, grouping: GroupingVersion = .newProjectDefault, by actor: Principal = .system, address: String? = nil
    ) async throws -> ProjectCredentials {
        let created = try await store.create(slug: slug, grouping: grouping)
        await audit.record("project.create", by: actor, projectSlug: slug, target: slug, address: address)
        return created
    }

    /// Replaces one or both of a project's keys; the entry's target names which.
    public func rotateKeys(
        slug: String, _ keys: KeyRotation, by actor: Principal = .system, address: String? = nil
    ) async throws -> RotatedCredentials {
        let rotated = try await store.rotateKeys(slug: slug, keys)
        await audit.record("project.rotate-keys", by: actor, projectSlug: slug, target: keys.description, address: address)
        return rotated
    }
}
