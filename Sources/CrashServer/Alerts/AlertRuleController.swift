import Foundation
import Hummingbird
import Logging
import NIOCore

/// `POST/GET /v1/projects/{project}/alert-rules` and `GET/PATCH/DELETE .../alert-rules/{id}`,
/// behind the project's read token (401 without one, 404 with another project's).
struct AlertRuleController<Store: AlertRuleStore, Projects: ReadTokenLookup>: Sendable {
    let store: Store
    /// Resolves the read token (``ReadAuthenticationMiddleware``).
    let projects: Projects
    /// Whether the server sends e-mail (`CRASHGUARD_SMTP_URL`): without it an e-mail action is a 400.
    let email: Bool

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let rules = router.group("/v1/projects/:project/alert-rules").add(middleware: ReadAuthenticationMiddleware(store: projects))
        rules.post(use: create)
        rules.get(use: list)
        rules.get(":id", use: show)
        rules.patch(":id", use: update)
        rules.delete(":id", use: delete)
    }

    /// Most bytes of a rule's body.
    static var maxBodyBytes: Int { 64 * 1024 }

    @Sendable func create(request: Request, context: CrashRequestContext) async throws -> EditedResponse<AlertRuleBody> {
        let project = try context.requireReadProject()
        let bytes = Array(buffer: try await request.body.collect(upTo: Self.maxBodyBytes))
        let rule = try AlertRule.parse(bytes, context: try await ruleContext(project))
        guard let stored = try await store.create(project: project.id, rule) else {
            throw APIError.badRequest("name: the project already has \(AlertRule.maxPerProject) rules; delete one first")
        }
        context.logger.info("alert rule created", metadata: ["project.slug": "\(project.slug)", "rule.id": "\(stored.id)"])
        return EditedResponse(status: .created, response: stored.body)
    }

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> AlertRuleListBody {
        let project = try context.requireReadProject()
        return AlertRuleListBody(rules: try await store.list(project: project.id).map(\.body))
    }

    @Sendable func show(request: Request, context: CrashRequestContext) async throws -> AlertRuleBody {
        let (project, id) = try ids(context)
        guard let stored = try await store.rule(project: project.id, id: id) else { throw Self.notFound(context, project) }
        return stored.body
    }

    @Sendable func update(request: Request, context: CrashRequestContext) async throws -> AlertRuleBody {
        let (project, id) = try ids(context)
        let bytes = Array(buffer: try await request.body.collect(upTo: Self.maxBodyBytes))
        guard let stored = try await store.rule(project: project.id, id: id) else { throw Self.notFound(context, project) }
        let rule = try AlertRule.patch(stored.rule, with: bytes, context: try await ruleContext(project))
        guard let updated = try await store.update(project: project.id, id: id, rule) else { throw Self.notFound(context, project) }
        context.logger.info("alert rule updated", metadata: ["project.slug": "\(project.slug)", "rule.id": "\(id)"])
        return updated.body
    }

    @Sendable func delete(request: Request, context: CrashRequestContext) async throws -> Response {
        let (project, id) = try ids(context)
        guard try await store.delete(project: project.id, id: id) else { throw Self.notFound(context, project) }
        context.logger.info("alert rule deleted", metadata: ["project.slug": "\(project.slug)", "rule.id": "\(id)"])
        return Response(status: .noContent)
    }

    private func ruleContext(_ project: ProjectRef) async throws -> AlertRule.Context {
        AlertRule.Context(webhooks: try await store.webhookIDs(project: project.id), email: email)
    }

    /// The project and the rule id of the path; a malformed id is an unknown rule.
    private func ids(_ context: CrashRequestContext) throws -> (ProjectRef, Int64) {
        let project = try context.requireReadProject()
        guard let id = Int64(context.parameters.get("id") ?? ""), id > 0 else { throw Self.notFound(context, project) }
        return (project, id)
    }

    private static func notFound(_ context: CrashRequestContext, _ project: ProjectRef) -> APIError {
        .notFound("no alert rule '\((context.parameters.get("id") ?? "").prefix(64))' in project '\(project.slug)'")
    }
}

extension AlertRuleBody: ResponseEncodable {}
extension AlertRuleListBody: ResponseEncodable {}
