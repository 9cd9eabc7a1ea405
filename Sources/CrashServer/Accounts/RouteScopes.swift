import HTTPTypes

/// The scope every authenticated route needs (accounts.md, "API tokens"): an API token must
/// carry it, and its user's role on the project must grant it, at the time of use. A route
/// missing here is refused to every API token (403), and `RouteScopesTests` fails for it,
/// so a new route cannot slip through unscoped. Read tokens keep the rights they always had.
enum RouteScopes {
    /// `"METHOD /path/{parameter}"` (Hummingbird's endpoint path) -> scope. HEAD is GET's.
    static let table: [String: TokenScope] = [
        "POST /v1/projects": .projectAdmin,
        "GET /v1/projects/{project}/crashes": .projectRead,
        "GET /v1/projects/{project}/crashes/{id}": .projectRead,
        "GET /v1/projects/{project}/crashes/{id}/reports": .projectRead,
        "GET /v1/projects/{project}/crashes/{id}/activity": .projectRead,
        "GET /v1/projects/{project}/stats": .projectRead,
        "GET /v1/projects/{project}/releases": .projectRead,
        "GET /v1/projects/{project}/releases/{version}": .projectRead,
        "PATCH /v1/projects/{project}/crashes": .projectTriage,
        "PATCH /v1/projects/{project}/crashes/{id}": .projectTriage,
        "POST /v1/projects/{project}/crashes/{id}/comments": .projectTriage,
        "POST /v1/projects/{project}/crashes/{id}/merge": .projectTriage,
        "POST /v1/projects/{project}/crashes/{id}/unmerge": .projectTriage,
        // Settings (data-protection.md: "the admin scope once accounts exist") and erasure.
        "GET /v1/projects/{project}/settings": .projectAdmin,
        "PATCH /v1/projects/{project}/settings": .projectAdmin,
        "DELETE /v1/projects/{project}/devices/{deviceId}": .projectAdmin,
        "GET /v1/projects/{project}/deletions/{id}": .projectAdmin,
        "GET /v1/projects/{project}/webhooks": .projectAdmin,
        "POST /v1/projects/{project}/webhooks": .projectAdmin,
        "DELETE /v1/projects/{project}/webhooks/{id}": .projectAdmin,
        "GET /v1/projects/{project}/members": .projectAdmin,
        "GET /v1/projects/{project}/members/{email}": .projectAdmin,
        "PUT /v1/projects/{project}/members/{email}": .projectAdmin,
        "DELETE /v1/projects/{project}/members/{email}": .projectAdmin,
        "GET /v1/projects/{project}/alert-rules": .projectRead,
        "GET /v1/projects/{project}/alert-rules/{id}": .projectRead,
        "POST /v1/projects/{project}/alert-rules": .projectAdmin,
        "PATCH /v1/projects/{project}/alert-rules/{id}": .projectAdmin,
        "DELETE /v1/projects/{project}/alert-rules/{id}": .projectAdmin,
        "POST /v1/projects/{project}/debug-files": .debugFilesWrite,
        // sentry-cli's chunk upload names no project: an API token's only project, or --org's.
        "GET /api/0/organizations/{org}/chunk-upload": .debugFilesWrite,
        "POST /api/0/organizations/{org}/chunk-upload": .debugFilesWrite,
        "POST /api/0/projects/{org}/{project}/files/difs/assemble": .debugFilesWrite,
        "GET /v1/tokens": .tokensWrite,
        "POST /v1/tokens": .tokensWrite,
        "DELETE /v1/tokens/{id}": .tokensWrite,
        "GET /v1/audit": .projectAdmin,
    ]

    /// The scope of a route, or nil when it has none declared.
    static func scope(method: HTTPRequest.Method, path: String?) -> TokenScope? {
        guard var path else { return nil }
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        let verb = method == .head ? "GET" : method.rawValue
        return table["\(verb) \(path)"]
    }

    /// Routes that take no read token or API token: ingest (the ingest key), operations, the
    /// dashboard (its session cookie) and the documents. `RouteScopesTests` checks every other
    /// route is in ``table``.
    static func isUnscoped(_ path: String) -> Bool {
        !(path.hasPrefix("/v1/projects/{project}/") || path == "/v1/projects" || path.hasPrefix("/api/0/projects/") || path.hasPrefix("/v1/tokens")
            || path.hasPrefix("/v1/audit") || path.hasPrefix("/api/0/organizations/"))
    }
}
