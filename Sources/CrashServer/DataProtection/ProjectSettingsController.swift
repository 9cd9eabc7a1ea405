import Hummingbird
import Logging

/// `GET` and `PATCH /v1/projects/{project}/settings` (data-protection.md, "Project settings"),
/// behind the project's read token (401 without one, 404 with another project's); an API
/// token needs `project:admin` for both (``RouteScopes``).
struct ProjectSettingsController<Projects: ReadTokenLookup>: Sendable {
    let cache: ProjectSettingsCache
    /// Resolves the read token (``ReadAuthenticationMiddleware``).
    let projects: Projects
    /// `CRASHGUARD_RETENTION_DAYS`: the retention of a project that set none.
    let serverRetentionDays: Int

    var store: any ProjectSettingsStore { cache.store }

    /// Most bytes of a `PATCH` body (20 patterns of 256 bytes and two lists of 50 fields, escaped).
    static var maxBodyBytes: Int { 64 * 1024 }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let settings = router.group("/v1/projects/:project/settings").add(middleware: ReadAuthenticationMiddleware(store: projects))
        settings.get(use: show)
        settings.patch(use: update)
    }

    @Sendable func show(request: Request, context: CrashRequestContext) async throws -> ProjectSettingsBody {
        let project = try context.requireReadProject()
        return try await body(try await store.settings(project: project.id), project: project.id)
    }

    @Sendable func update(request: Request, context: CrashRequestContext) async throws -> ProjectSettingsBody {
        let project = try context.requireReadProject()
        let bytes = Array(buffer: try await request.body.collect(upTo: Self.maxBodyBytes))
        let updated = try await store.update(project: project.id) { try $0.patched(with: bytes) }
        cache.replace(project: project.id, with: updated)
        context.logger.info("project settings changed", metadata: ["project.slug": "\(project.slug)"])
        return try await body(updated, project: project.id)
    }

    private func body(_ settings: ProjectSettings, project: Int64) async throws -> ProjectSettingsBody {
        ProjectSettingsBody(
            settings, serverRetentionDays: serverRetentionDays, quotaUsedToday: try await store.quotaUsedToday(project: project))
    }
}

extension ProjectSettingsBody: ResponseEncodable {}
