import Foundation
import Hummingbird
import Logging

/// Adds the web dashboard's routes. The key of the forms' CSRF tokens is
/// `configuration.sessionSecret`, or a random one (a form shown before a restart must then be
/// reloaded); cookies are `Secure` and `__Host-` unless the public URL is http on a loopback
/// host (``DashboardSessions/securesCookies(publicURL:)``).
func addDashboard(
    to router: some RouterMethods<CrashRequestContext>, database: CrashDatabase, releases: ReleasesController,
    configuration: ServerConfiguration, logger: Logger
) throws {
    let secret: [UInt8]
    if !configuration.sessionSecret.isEmpty {
        secret = Array(configuration.sessionSecret.utf8)
    } else {
        secret = DashboardSessions.randomSecret()
        logger.notice("CRASHGUARD_SESSION_SECRET not set: dashboard forms shown before a restart must be reloaded")
    }
    let secure = DashboardSessions.securesCookies(publicURL: configuration.publicURL)
    let sessions = DashboardSessions(secret: secret, secure: secure)
    DashboardController(
        store: PostgresDashboardStore(database: database, releases: releases), sessions: sessions, pages: try DashboardPages(), logger: logger,
        people: DashboardAccounts(database: database, cookies: sessions, configuration: configuration, logger: logger)
    ).addRoutes(to: router)
}
