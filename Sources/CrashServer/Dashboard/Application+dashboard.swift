import Foundation
import Hummingbird
import Logging

/// Adds the web dashboard's routes. The session key is `configuration.sessionSecret`, or
/// a random one (sessions then end on restart); cookies are `Secure` when the public URL
/// is https.
func addDashboard(
    to router: some RouterMethods<CrashRequestContext>, store: some DashboardStore, configuration: ServerConfiguration, logger: Logger
) throws {
    let secret: [UInt8]
    if !configuration.sessionSecret.isEmpty {
        secret = Array(configuration.sessionSecret.utf8)
    } else {
        secret = DashboardSessions.randomSecret()
        logger.notice("CRASHGUARD_SESSION_SECRET not set: dashboard sessions end when the server restarts")
    }
    let secure = configuration.publicURL.lowercased().hasPrefix("https://")
    DashboardController(
        store: store, sessions: DashboardSessions(secret: secret, secure: secure), pages: try DashboardPages(), logger: logger
    ).addRoutes(to: router)
}
