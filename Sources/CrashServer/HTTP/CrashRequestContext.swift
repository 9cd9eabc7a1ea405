import CrashWire
import Foundation
import Hummingbird
import NIOCore

/// The request context of every CrashGuard route: RFC 3339 dates in JSON bodies.
public struct CrashRequestContext: RequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage

    /// The project whose read token authenticated the request (set by
    /// `ReadAuthenticationMiddleware` on the `/v1/projects/{project}/...` routes).
    public var readProject: ProjectRef?

    /// The project whose ingest key authenticated the request (set by
    /// `IngestAuthenticationMiddleware` on the ingest doors).
    public var ingestProject: ProjectRef?

    /// Who makes the request, as read authentication found it (the read token unless
    /// the request was authenticated otherwise); activity and audit entries name it.
    public var principal: Principal = .readToken

    /// The signed-in user (a dashboard session or an API token's owner); nil for a read token.
    public var user: User?
    /// The API token that authenticated the request, if one did.
    var apiToken: APIToken?

    /// The client's address (the connection's peer): the sign-in rate limit counts failures
    /// per address, and audit entries name it.
    public var clientAddress: String?

    /// Creates the context for one request.
    public init(source: Source) {
        coreContext = .init(source: source)
        clientAddress = source.channel.remoteAddress?.ipAddress
    }

    /// Responses encode dates as RFC 3339 in UTC.
    public var responseEncoder: JSONEncoder { .crashWire() }

    /// Requests decode dates as RFC 3339.
    public var requestDecoder: JSONDecoder { .crashWire() }
}
