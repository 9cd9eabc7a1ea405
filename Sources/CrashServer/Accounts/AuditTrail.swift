import HTTPTypes
import Hummingbird

/// The audit entries of changes made through routes that do not record their own: every
/// write (POST, PUT, PATCH, DELETE) answered below 400 on an authenticated route is recorded
/// by the authentication middleware that let it in, under the request's principal, so a new
/// route is audited without doing anything.
enum AuditTrail {
    /// Dotted action names of the known routes; any other is recorded as `"METHOD /path"`.
    static let actions: [String: String] = [
        "PATCH /v1/projects/{project}/crashes": "group.bulk-triage",
        "PATCH /v1/projects/{project}/crashes/{id}": "group.triage",
        "POST /v1/projects/{project}/crashes/{id}/comments": "group.comment",
        "POST /v1/projects/{project}/crashes/{id}/merge": "group.merge",
        "POST /v1/projects/{project}/crashes/{id}/unmerge": "group.unmerge",
        "PATCH /v1/projects/{project}/settings": "settings.update",
        "POST /v1/projects/{project}/webhooks": "webhook.create",
        "DELETE /v1/projects/{project}/webhooks/{id}": "webhook.delete",
        "POST /v1/projects/{project}/alert-rules": "alert-rule.create",
        "PATCH /v1/projects/{project}/alert-rules/{id}": "alert-rule.update",
        "DELETE /v1/projects/{project}/alert-rules/{id}": "alert-rule.delete",
        // Names no device: the audit log keeps no copy of an erased device id either.
        "DELETE /v1/projects/{project}/devices/{deviceId}": "device.erase",
        "POST /v1/projects/{project}/debug-files": "debug-file.upload",
        "POST /api/0/projects/{org}/{project}/files/difs/assemble": "debug-file.assemble",
        "POST /projects/{project}/crashes/{id}": "group.triage",
    ]

    /// Routes whose handlers record their own, more precise entries.
    static let recordedByHandler: Set<String> = [
        "/signin", "/signout", "/setup/{token}", "/projects/{project}/members", "/v1/projects/{project}/members/{email}",
        "/v1/tokens", "/v1/tokens/{id}", "/tokens", "/projects/{project}/alerts",
    ]

    /// The entry of a request that changed something, or nil (a read, a refusal, or a route
    /// that records its own).
    static func entry(_ request: Request, _ context: CrashRequestContext, status: HTTPResponse.Status) -> (action: String, target: String?)? {
        guard [.post, .put, .patch, .delete].contains(request.method), status.code < 400 else { return nil }
        var path = context.endpointPath ?? request.uri.path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        guard !recordedByHandler.contains(path) else { return nil }
        let key = "\(request.method.rawValue) \(path)"
        let target = ["id", "version", "email"].compactMap { context.parameters.get($0) }.first
        return (actions[key] ?? key, target)
    }

    /// Records `request`'s change, if it made one.
    static func record(_ request: Request, _ context: CrashRequestContext, status: HTTPResponse.Status, in log: AuditLog) async {
        guard let (action, target) = entry(request, context, status: status) else { return }
        await log.record(
            action, by: context.principal, projectSlug: context.parameters.get("project"), target: target, address: context.clientAddress)
    }
}
