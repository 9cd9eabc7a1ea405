import Foundation
import HTTPTypes
import Hummingbird

/// The Tokens page's forms: `action` = create (name, scope boxes, an optional project) or
/// revoke (`id`).
struct TokenForm: Decodable {
    var action: String?
    var name: String?
    var project: String?
    var id: String?
    var projectRead: String?
    var projectTriage: String?
    var projectAdmin: String?
    var debugFilesWrite: String?
    var tokensWrite: String?
    var csrf: String?

    /// The scopes whose boxes are ticked.
    var scopes: [String] {
        [
            (projectRead, TokenScope.projectRead), (projectTriage, .projectTriage), (projectAdmin, .projectAdmin),
            (debugFilesWrite, .debugFilesWrite), (tokensWrite, .tokensWrite),
        ].compactMap { $0.0 == nil ? nil : $0.1.rawValue }
    }
}

struct TokensView: Sendable {
    struct Row: Sendable {
        var id: String
        var name: String
        var scopes: String
        var projects: String
        var expires: String
        var lastUsed: String
        var csrf: String
    }
    struct Created: Sendable {
        var name: String
        var secret: String
    }
    var pageTitle = "API tokens"
    var csrf: String
    var created: Created?
    var error: String?
    var hasTokens: Bool
    var tokens: [Row]
}

extension DashboardController {
    func addTokenRoutes(to group: some RouterMethods<CrashRequestContext>) {
        group.get("/tokens", use: tokensPage)
        group.post("/tokens", use: changeTokens)
    }

    /// A signed-in user's tokens and the form that makes one (the API's `POST /v1/tokens`).
    @Sendable func tokensPage(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let user = context.user else { throw DashboardError.signInRequired }
        return try await tokens(user, request, created: nil, error: nil)
    }

    @Sendable func changeTokens(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let user = context.user else { throw DashboardError.signInRequired }
        let form = try await Self.form(request, as: TokenForm.self)
        guard let session = userSession(request), DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else {
            throw DashboardError.forbidden
        }
        let service = TokenService(tokens: people.tokens, members: people.members, audit: people.audit)
        switch form.action {
        case "create":
            let project = (form.project ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            do {
                let (token, secret) = try await service.create(
                    for: user, name: form.name ?? "", scopes: form.scopes, projects: project.isEmpty ? nil : [project], expiresAt: nil,
                    creator: nil, by: context.principal, address: context.clientAddress)
                return try await tokens(user, request, created: .init(name: token.name, secret: secret), error: nil)
            } catch let error as APIError {
                return try await tokens(user, request, created: nil, error: error.message, status: error.status)
            }
        case "revoke":
            try await service.revoke(form.id ?? "", of: user, by: context.principal, address: context.clientAddress)
            return DashboardResponse.redirect("/tokens")
        default: throw APIError.badRequest("action: must be create or revoke")
        }
    }

    /// The session of the request's cookie (whose CSRF token the forms carry).
    func userSession(_ request: Request) -> DashboardSessions.Session? {
        request.cookies[sessions.cookieName].flatMap { DashboardSessions.session(cookie: $0.value) }
    }

    private func tokens(
        _ user: User, _ request: Request, created: TokensView.Created?, error: String?, status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let list = try await people.tokens.tokens(user: user.id)
        let csrf = userSession(request).map { sessions.csrfToken(for: $0) } ?? ""
        let view = TokensView(
            csrf: csrf, created: created, error: error, hasTokens: !list.isEmpty,
            tokens: list.map {
                .init(
                    id: $0.id, name: $0.name, scopes: $0.scopes.map(\.rawValue).joined(separator: ", "),
                    projects: $0.projects?.joined(separator: ", ") ?? "all", expires: $0.expiresAt.map(DashboardFormat.exact) ?? "never",
                    lastUsed: $0.lastUsedAt.map(DashboardFormat.exact) ?? "never", csrf: csrf)
            })
        return try html(view, "tokens", status: status)
    }
}
