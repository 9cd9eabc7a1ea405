import CrashWire
import Foundation
import Hummingbird

/// The request context of every CrashGuard route: RFC 3339 dates in JSON bodies.
public struct CrashRequestContext: RequestContext {
    /// Hummingbird's per-request storage.
    public var coreContext: CoreRequestContextStorage

    /// Creates the context for one request.
    public init(source: Source) {
        coreContext = .init(source: source)
    }

    /// Responses encode dates as RFC 3339 in UTC.
    public var responseEncoder: JSONEncoder { .crashWire() }

    /// Requests decode dates as RFC 3339.
    public var requestDecoder: JSONDecoder { .crashWire() }
}
