/// Names and limits of the wire contract (api-v1), shared by the SDK and the server.
public enum WireProtocol {
    /// The ingest path.
    public static let reportsPath = "/v1/reports"
    /// Header carrying the project's ingest key.
    public static let ingestKeyHeader = "X-Crash-Key"
    /// The only accepted media type.
    public static let mediaType = "application/json"
    /// Most reports in one batch.
    public static let maxReportsPerBatch = 1000
    /// Default cap on a compressed request body (configurable on the server).
    public static let defaultMaxCompressedBytes = 1 << 20
    /// Default cap on a decompressed request body (configurable on the server).
    public static let defaultMaxDecompressedBytes = 16 << 20
}

/// Per-report limits of the contract, in UTF-8 bytes.
public enum ReportLimits {
    /// Reason length.
    public static let reasonBytes = 1...8192
    /// Most stack frames.
    public static let maxFrames = 256
    /// Longest stack frame.
    public static let frameBytes = 1024
    /// `app.id`, `app.version`, `app.build` length.
    public static let appFieldBytes = 1...128
    /// Longest device field (may be empty).
    public static let deviceFieldBytes = 128
    /// Fingerprint part count.
    public static let fingerprintParts = 1...8
    /// Longest fingerprint part.
    public static let fingerprintPartBytes = 256
    /// Most context entries.
    public static let maxContextEntries = 64
    /// Longest context key.
    public static let contextKeyBytes = 64
    /// Longest context value.
    public static let contextValueBytes = 1024
    /// `environment` length.
    public static let environmentBytes = 1...64
    /// The environment of a report that names none.
    public static let defaultEnvironment = "production"
    /// How old a report may be.
    public static let maxAge: Double = 30 * 86_400
    /// How far in the future a report may be (clock skew).
    public static let maxSkew: Double = 86_400
}
