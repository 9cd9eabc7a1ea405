import Foundation
import Hummingbird
import Logging

/// `DELETE /v1/projects/{project}/devices/{deviceId}` (202 `{"deletion": id}`, carried out by
/// ``DeletionWorker``) and `GET /v1/projects/{project}/deletions/{id}`, behind the project's read
/// token (401 without one or with an ingest key, 404 with another project's). The answer is the
/// same for a device with no reports: it does not tell whether a device was known.
struct ErasureController<Store: DeletionStore, Projects: ReadTokenLookup>: Sendable {
    let store: Store
    /// Resolves the read token (``ReadAuthenticationMiddleware``).
    let projects: Projects

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let project = router.group("/v1/projects/:project").add(middleware: ReadAuthenticationMiddleware(store: projects))
        project.delete("devices/:deviceId", use: erase)
        project.get("deletions/:id", use: show)
    }

    @Sendable func erase(request: Request, context: CrashRequestContext) async throws -> EditedResponse<DeletionAccepted> {
        let project = try context.requireReadProject()
        let raw = context.parameters.get("deviceId") ?? ""
        let device = raw.removingPercentEncoding ?? raw
        guard (1...128).contains(device.utf8.count) else { throw APIError.badRequest("deviceId: must be 1 to 128 bytes") }
        let id = try await store.request(project: project.id, device: device)
        // The device id is never logged: the deletion's id is what names it from now on.
        context.logger.info("deletion requested", metadata: ["project.slug": "\(project.slug)", "deletion.id": "\(id)"])
        return EditedResponse(status: .accepted, response: DeletionAccepted(deletion: id.uuidString.lowercased()))
    }

    @Sendable func show(request: Request, context: CrashRequestContext) async throws -> Deletion {
        let project = try context.requireReadProject()
        let text = context.parameters.get("id") ?? ""
        guard let id = UUID(uuidString: text), let deletion = try await store.deletion(project: project.id, id: id) else {
            throw APIError.notFound("no deletion '\(text)' in project '\(project.slug)'")
        }
        return deletion
    }
}

extension Deletion: ResponseEncodable {}
extension DeletionAccepted: ResponseEncodable {}
