import Foundation
import Hummingbird
import Logging
import NIOCore

/// `POST/GET /v1/projects/{project}/webhooks` and `DELETE .../webhooks/{id}`, behind the
/// project's read token (401 without one, 404 with another project's).
struct WebhookController<Store: WebhookStore, Projects: ReadTokenLookup>: Sendable {
    let store: Store
    /// Resolves the read token (``ReadAuthenticationMiddleware``).
    let projects: Projects
    /// `CRASHGUARD_WEBHOOK_ALLOW_HOSTS`: hosts accepted although refused by the address rules.
    let allowList: WebhookAllowList

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let webhooks = router.group("/v1/projects/:project/webhooks").add(middleware: ReadAuthenticationMiddleware(store: projects))
        webhooks.post(use: create)
        webhooks.get(use: list)
        webhooks.delete(":id", use: delete)
    }

    @Sendable func create(request: Request, context: CrashRequestContext) async throws -> EditedResponse<CreatedWebhookBody> {
        let project = try context.requireReadProject()
        let bytes = Array(buffer: try await request.body.collect(upTo: 16 * 1024))
        let hook = try WebhookRequest.parse(bytes, allowList: allowList)
        let created = try await store.create(
            project: project.id, hook, secret: ProjectKeys.generate(prefix: "whsec_"))
        context.logger.info("webhook created", metadata: ["project.slug": "\(project.slug)", "webhook.id": "\(created.id)"])
        return EditedResponse(status: .created, response: created)
    }

    @Sendable func list(request: Request, context: CrashRequestContext) async throws -> WebhookListBody {
        let project = try context.requireReadProject()
        return WebhookListBody(webhooks: try await store.list(project: project.id))
    }

    @Sendable func delete(request: Request, context: CrashRequestContext) async throws -> Response {
        let project = try context.requireReadProject()
        let text = context.parameters.get("id") ?? ""
        if let id = Int64(text), case let rules = try await store.rulesUsing(project: project.id, webhook: id), !rules.isEmpty {
            // 409 (HTTPError: its message is the `error`, ErrorMiddleware).
            let names = rules.prefix(10).map { "'\($0)'" }.joined(separator: ", ")
            throw HTTPError(.conflict, message: "id: the webhook is used by the alert rules \(names); remove it from them first")
        }
        guard let id = Int64(text), id > 0, try await store.delete(project: project.id, id: id) else {
            throw APIError.notFound("no webhook '\(text)' in project '\(project.slug)'")
        }
        context.logger.info("webhook deleted", metadata: ["project.slug": "\(project.slug)", "webhook.id": "\(id)"])
        return Response(status: .noContent)
    }
}

extension CreatedWebhookBody: ResponseEncodable {}
extension WebhookListBody: ResponseEncodable {}
