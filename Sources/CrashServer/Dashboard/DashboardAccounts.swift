import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The dashboard's accounts: password sign-in, set-up links, the project switcher, the
/// members page, and who is signed in (docs/accounts.md).
struct DashboardAccounts: Sendable {
    let accounts: AccountService<PostgresUserStore>
    let members: PostgresMemberStore
    let tokens: PostgresTokenStore
    let audit: AuditLog
    /// Whether the sign-in page offers single sign-on.
    let singleSignOn: Bool
    /// Whether the server sends e-mail (`CRASHGUARD_SMTP_URL`): the alert rules page offers
    /// e-mail actions only then.
    let email: Bool

    /// The user signed in to the page being built (set by ``DashboardAccountMiddleware``),
    /// nil for a read-token session or none.
    @TaskLocal static var current: User?

    init(database: CrashDatabase, cookies: DashboardSessions, configuration: ServerConfiguration, logger: Logger) {
        accounts = AccountService(
            users: PostgresUserStore(database: database), cookies: cookies, publicURL: configuration.publicURL, logger: logger)
        members = PostgresMemberStore(database: database)
        tokens = PostgresTokenStore(database: database)
        audit = AuditLog(database: database, logger: logger)
        singleSignOn = configuration.oidc.isEnabled
        email = configuration.email.enabled
    }
}

/// Finds the user a dashboard request's session cookie belongs to, and makes it the
/// request's ``CrashRequestContext/principal`` (so triage names the user) and
/// ``DashboardAccounts/current``; a cookie of a read-token session, or none, changes nothing.
/// Records every form that changed something in the audit log (``AuditTrail``).
struct DashboardAccountMiddleware: RouterMiddleware {
    typealias Context = CrashRequestContext
    let accounts: AccountService<PostgresUserStore>
    let audit: AuditLog

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        var user: User?
        if let value = request.cookies[accounts.cookies.cookieName]?.value {
            user = try await accounts.user(sessionCookie: value)
        }
        if let user {
            context.user = user
            context.principal = user.principal
        }
        let response = try await DashboardAccounts.$current.withValue(user) { [context] in try await next(request, context) }
        await AuditTrail.record(request, context, status: response.status, in: audit)
        return response
    }
}

/// The set-up page's form.
struct SetupForm: Decodable {
    var password: String?
    var csrf: String?
}

/// The members page's forms: `action` = set (with `role`) or remove.
struct MemberForm: Decodable {
    var action: String?
    var email: String?
    var role: String?
    var csrf: String?
}

struct SetupView: Sendable {
    var pageTitle = "Choose a password"
    var token: String
    var email: String?
    var csrf: String
    var valid: Bool
    var error: String?
}

struct ProjectsView: Sendable {
    struct Row: Sendable {
        var slug: String
        var role: String
    }
    var pageTitle = "Projects"
    var who: String
    var csrf: String
    var hasProjects: Bool
    var projects: [Row]
}

struct MembersView: Sendable {
    struct Row: Sendable {
        var email: String
        var name: String
        var role: String
        var project: String
        var csrf: String
        var canManage: Bool
    }
    var pageTitle: String
    var nav: NavView
    var project: String
    var csrf: String
    var canManage: Bool
    var notice: String?
    var members: [Row]
}

extension DashboardController {
    func addAccountRoutes(to group: some RouterMethods<CrashRequestContext>) {
        group.get("/setup/:token", use: setupPage)
        group.post("/setup/:token", use: setup)
        group.get("/projects/:project/members", use: membersPage)
        group.post("/projects/:project/members", use: changeMember)
        addTokenRoutes(to: group)
    }

    /// The signed-in user's project on a project page: 404 for a project the user may not
    /// open (as for one that does not exist), 403 for a form (POST) below the `member` role.
    func userProject(_ user: User, _ request: Request, _ context: CrashRequestContext) async throws -> (ProjectRef, ProjectRole) {
        let slug = context.parameters.get("project") ?? ""
        guard let (project, role) = try await people.members.access(user: user, project: slug) else {
            throw APIError.notFound("no project '\(slug)'")
        }
        if request.method == .post && role < .member { throw AccountError.forbidden("your role on \(slug) is viewer") }
        return (project, role)
    }

    /// `POST /signin` with an e-mail and password (the CSRF token already checked).
    func passwordSignIn(email: String, password: String, context: CrashRequestContext) async throws -> Response {
        let actor = Principal(kind: .user, id: nil, name: String(email.prefix(320)))
        switch try await people.accounts.signIn(email: email, password: password, address: context.clientAddress) {
        case .limited:
            await people.audit.record("user.sign-in-refused", by: actor, target: actor.name, address: context.clientAddress)
            return signInPage(error: "Too many failed sign-ins: try again in 15 minutes.", status: .tooManyRequests)
        case .refused:
            await people.audit.record("user.sign-in-failed", by: actor, target: actor.name, address: context.clientAddress)
            return signInPage(error: "Wrong e-mail or password.", status: .unauthorized)
        case .signedIn(let user, let cookie):
            await people.audit.record("user.sign-in", by: user.principal, target: user.email, address: context.clientAddress)
            logger.info("dashboard sign-in", metadata: ["user.id": "\(user.id)"])
            var response = DashboardResponse.redirect("/")
            response.setCookie(cookie)
            response.setCookie(sessions.expired(sessions.signInCookieName))
            return response
        }
    }

    /// `/` for a signed-in user: the project switcher, the projects the user may open.
    func projectsPage(_ user: User, _ request: Request) async throws -> Response {
        let projects = try await people.members.projects(user: user)
        let csrf =
            request.cookies[sessions.cookieName].flatMap { DashboardSessions.session(cookie: $0.value) }
            .map { sessions.csrfToken(for: $0) } ?? ""
        let view = ProjectsView(
            who: "Signed in as \(user.email)\(user.isAdmin ? " (server admin)" : "")", csrf: csrf, hasProjects: !projects.isEmpty,
            projects: projects.map { .init(slug: $0.0.slug, role: $0.1.rawValue) })
        return try html(view, "projects")
    }

    /// Ends a user's session (the CSRF token already checked).
    func userSignOut(_ user: User, _ request: Request, _ context: CrashRequestContext) async throws {
        guard let value = request.cookies[sessions.cookieName]?.value else { return }
        try await people.accounts.signOut(sessionCookie: value)
        await people.audit.record("user.sign-out", by: user.principal, target: user.email, address: context.clientAddress)
    }

    // MARK: - Set-up links

    @Sendable func setupPage(request: Request, context: CrashRequestContext) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        let user = try await people.accounts.setupUser(token: token)
        return setupView(token: token, user: user, error: user == nil ? "This link is unknown, used or expired: ask an admin for a new one." : nil)
    }

    @Sendable func setup(request: Request, context: CrashRequestContext) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        let form = try await Self.form(request, as: SetupForm.self)
        guard let nonce = request.cookies[sessions.signInCookieName]?.value,
            DashboardSessions.equal(sessions.signInToken(nonce: nonce), form.csrf ?? "")
        else { throw DashboardError.forbidden }
        let password = form.password ?? ""
        if let problem = PasswordHasher.problem(password) {
            return setupView(token: token, user: try await people.accounts.setupUser(token: token), error: problem, status: .badRequest)
        }
        guard let user = try await people.accounts.setPassword(token: token, password: password) else {
            return setupView(
                token: token, user: nil, error: "This link is unknown, used or expired: ask an admin for a new one.", status: .notFound)
        }
        await people.audit.record("user.password-set", by: user.principal, target: user.email, address: context.clientAddress)
        var response = DashboardResponse.redirect("/")
        response.setCookie(try await people.accounts.startSession(user))
        response.setCookie(sessions.expired(sessions.signInCookieName))
        return response
    }

    private func setupView(token: String, user: User?, error: String?, status: HTTPResponse.Status = .ok) -> Response {
        let nonce = DashboardSessions.nonce()
        let view = SetupView(
            token: DashboardQuery.encode(token), email: user?.email, csrf: sessions.signInToken(nonce: nonce), valid: user != nil,
            error: error)
        var response =
            (try? html(view, "setup", status: user == nil && status == .ok ? .notFound : status))
            ?? Response(status: .internalServerError)
        response.setCookie(sessions.signInCookie(nonce))
        return response
    }

    // MARK: - Members

    @Sendable func membersPage(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let user = context.user else { throw DashboardError.signInRequired }
        let (project, role) = try await userProject(user, request, context)
        return try await members(project, role, request, notice: request.uri.queryParameters["saved"].map { _ in "Saved." })
    }

    @Sendable func changeMember(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let user = context.user else { throw DashboardError.signInRequired }
        let (project, role) = try await userProject(user, request, context)
        let form = try await Self.form(request, as: MemberForm.self)
        guard let session = request.cookies[sessions.cookieName].flatMap({ DashboardSessions.session(cookie: $0.value) }),
            DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "")
        else { throw DashboardError.forbidden }
        guard role == .admin else { throw AccountError.forbidden("only a project admin manages members") }
        let membership = MembershipService(users: people.accounts.users, members: people.members, audit: people.audit)
        let email = form.email ?? ""
        switch form.action {
        case "set":
            guard let newRole = form.role.flatMap(ProjectRole.init(rawValue:)) else {
                throw APIError.badRequest("role: must be viewer, member or admin")
            }
            try await membership.set(email: email, role: newRole, on: project, by: context.principal, address: context.clientAddress)
        case "remove":
            try await membership.remove(email: email, from: project, by: context.principal, address: context.clientAddress)
        default: throw APIError.badRequest("action: must be set or remove")
        }
        return DashboardResponse.redirect("/projects/\(project.slug)/members?saved=1")
    }

    private func members(_ project: ProjectRef, _ role: ProjectRole, _ request: Request, notice: String?) async throws -> Response {
        let list = try await people.members.members(project: project.id)
        let csrf =
            request.cookies[sessions.cookieName].flatMap { DashboardSessions.session(cookie: $0.value) }
            .map { sessions.csrfToken(for: $0) } ?? ""
        let manage = role == .admin
        let view = MembersView(
            pageTitle: "Members · \(project.slug)",
            nav: NavView(project: project.slug, csrf: csrf, overview: false, crashes: false, members: true), project: project.slug,
            csrf: csrf, canManage: manage, notice: notice,
            members: list.map { .init(email: $0.email, name: $0.name, role: $0.role.rawValue, project: project.slug, csrf: csrf, canManage: manage) })
        return try html(view, "members")
    }
}
