import Logging

/// swift-log's ``StreamLogHandler`` with its metadata formatted only when a message is written.
///
/// `StreamLogHandler` formats all its metadata into text every time an entry is set, whatever
/// the log level: Hummingbird sets `hb.request.id` on every request's logger, so at the default
/// level, which writes nothing per request, that was about 1.5 % of the server's CPU per
/// single-report request (docs/performance.md). This keeps the metadata as it is
/// and hands it to the wrapped handler when a message passes the level: the output is the
/// wrapped handler's, byte for byte.
public struct LazyMetadataLogHandler: LogHandler {
    private var base: StreamLogHandler

    /// Get or set the entire metadata storage; formatted only when a message is written.
    public var metadata: Logger.Metadata = [:]

    /// Wraps `base` (its own metadata is replaced by this handler's).
    public init(_ base: StreamLogHandler) {
        self.base = base
        metadata = base.metadata
    }

    /// The wrapped handler's level.
    public var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    /// The wrapped handler's metadata provider.
    public var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    /// One metadata entry.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes `event` through the wrapped handler, with this handler's metadata.
    public func log(event: LogEvent) {
        var handler = base
        handler.metadata = metadata
        handler.log(event: event)
    }
}
