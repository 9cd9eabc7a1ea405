import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The dashboard's single sign-on routes: `GET /dashboard/sso/start` sends the browser to the
/// identity provider, `GET /dashboard/sso/callback` is where the provider sends it back.
/// Both are 404 while single sign-on is off. A failure is an HTML page saying what to do
/// (the provider unreachable: 504; a refused account: 403; an expired, replayed or forged
/// sign-in: 400).
struct OIDCController<Users: UserStore, Logins: OIDCLoginStore>: Sendable {
    let signIn: OIDCSignIn<Users, Logins>?
    let cookies: DashboardSessions
    let pages: DashboardPages
    let logger: Logger

    /// The browser binding cookie: `Lax`, so the provider's redirect back (a cross-site
    /// navigation) carries it, and gone after 10 minutes.
    var browserCookieName: String { (cookies.secure ? "__Host-" : "") + "cg_sso" }

    func addRoutes(to router: some RouterMethods<CrashRequestContext>) {
        let group = router.group("dashboard/sso").add(middleware: DashboardMiddleware(pages: pages, logger: logger))
        group.get("start", use: start)
        group.get("callback", use: callback)
    }

    @Sendable func start(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let signIn else { return page(.notConfigured) }
        do {
            let start = try await signIn.start()
            var response = Response(status: .found, headers: [.location: start.location])
            response.setCookie(browserCookie(start.browser, maxAge: Int(OIDCSignIn<Users, Logins>.loginLifetime)))
            return response
        } catch let error as OIDCError {
            return page(error)
        }
    }

    @Sendable func callback(request: Request, context: CrashRequestContext) async throws -> Response {
        guard let signIn else { return page(.notConfigured) }
        let query = request.uri.queryParameters
        var response: Response
        do {
            if let error = query["error"] {
                try await signIn.cancel(state: query["state"].map(String.init) ?? "")
                throw OIDCError.providerRefused(OIDCProvider.errorCode(String(error)))
            }
            let (_, cookie) = try await signIn.finish(
                state: query["state"].map(String.init) ?? "", code: query["code"].map(String.init) ?? "",
                browser: request.cookies[browserCookieName]?.value, address: context.clientAddress)
            // A page, not a redirect: the session cookie is SameSite=Strict, and a redirect that
            // ends the provider's cross-site navigation would arrive without it.
            response = DashboardResponse.html(Self.signedInPage, status: .ok)
            response.setCookie(cookie)
        } catch let error as OIDCError {
            if !error.isAccountRefusal {
                // Account refusals are recorded with the e-mail (OIDCSignIn); these name no one.
                await signIn.audit.record("sso.sign-in-failed", by: Self.unknown, target: nil, address: context.clientAddress)
            }
            response = page(error)
        }
        response.setCookie(browserCookie("", maxAge: 0))
        return response
    }

    /// The actor of a sign-in that failed before the provider named anyone.
    static var unknown: Principal { Principal(kind: .user, id: nil, name: "single sign-on") }

    private func browserCookie(_ value: String, maxAge: Int) -> Cookie {
        Cookie(name: browserCookieName, value: value, maxAge: maxAge, path: "/", secure: cookies.secure, httpOnly: true, sameSite: .lax)
    }

    private func page(_ error: OIDCError) -> Response {
        let view = ErrorView(pageTitle: "Single sign-on", heading: "Single sign-on failed", message: error.message)
        let text = (try? pages.render(view, "error")) ?? error.message
        return DashboardResponse.html(text, status: error.status)
    }

    /// Opens the dashboard from this server's own page (no script: a refresh and a link).
    static var signedInPage: String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>Signed in</title>
        <meta http-equiv="refresh" content="0; url=/"><link rel="stylesheet" href="/dashboard.css"></head>
        <body><main><p id="signed-in">Signed in. <a href="/">Continue to the dashboard</a>.</p></main></body></html>
        """
    }
}

/// Adds the single sign-on routes (a 404 page while `configuration.oidc` is off). They answer
/// within the database timeout plus the provider's (``OIDCProvider/timeout``, for all of one
/// request's exchanges with it), so a dead provider is its own error page, not a database one.
func addSingleSignOn(
    to router: some RouterMethods<CrashRequestContext>, database: CrashDatabase, configuration: ServerConfiguration, logger: Logger
) throws {
    let cookies = DashboardSessions(
        secret: DashboardSessions.randomSecret(), secure: DashboardSessions.securesCookies(publicURL: configuration.publicURL))
    let accounts = AccountService(users: PostgresUserStore(database: database), cookies: cookies, publicURL: configuration.publicURL, logger: logger)
    let provider = OIDCProvider(settings: configuration.oidc, logger: logger)
    let signIn =
        configuration.oidc.isEnabled
        ? OIDCSignIn(
            settings: configuration.oidc, provider: provider, logins: PostgresOIDCLoginStore(database: database),
            accounts: accounts, members: PostgresMemberStore(database: database), audit: AuditLog(database: database, logger: logger),
            publicURL: configuration.publicURL, logger: logger)
        : nil
    let bounded = router.group().add(middleware: DatabaseDeadlineMiddleware(limit: configuration.databaseTimeout + provider.timeout))
    OIDCController(signIn: signIn, cookies: cookies, pages: try DashboardPages(), logger: logger).addRoutes(to: bounded)
}
