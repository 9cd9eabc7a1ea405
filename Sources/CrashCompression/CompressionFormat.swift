/// The two zlib framings the wire accepts as `Content-Encoding`.
public enum CompressionFormat: Sendable, Hashable {
    /// RFC 1952 gzip (`Content-Encoding: gzip`).
    case gzip
    /// RFC 1950 zlib stream (`Content-Encoding: deflate`).
    case deflate

    var windowBits: Int32 {
        switch self {
        case .gzip: return 15 + 16
        case .deflate: return 15
        }
    }
}
