/// Why a stream could not be compressed or inflated.
///
/// A struct over a private code, so cases can be added without breaking callers.
public struct CompressionError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case outputLimitExceeded(Int)
        case corrupt(String)
        case truncated
        case zlib(Int32)
    }

    private let code: Code

    private init(_ code: Code) { self.code = code }

    /// The inflated output would exceed the caller's cap.
    public static func outputLimitExceeded(limit: Int) -> Self { .init(.outputLimitExceeded(limit)) }
    /// The stream is not valid gzip/zlib data.
    public static func corrupt(_ detail: String) -> Self { .init(.corrupt(detail)) }
    /// The stream ended before its end marker.
    public static let truncated = Self(.truncated)
    /// zlib failed in a way that is not the data's fault (out of memory).
    static func zlib(_ status: Int32) -> Self { .init(.zlib(status)) }

    /// `true` when the output cap was hit (the server answers 413).
    public var isOutputLimitExceeded: Bool {
        if case .outputLimitExceeded = code { return true }
        return false
    }

    /// `true` when the stream itself is bad (the server answers 400).
    public var isInvalidData: Bool {
        switch code {
        case .corrupt, .truncated: return true
        default: return false
        }
    }

    public var description: String {
        switch code {
        case .outputLimitExceeded(let limit): return "decompressed body is over \(limit) bytes"
        case .corrupt(let detail): return "corrupt compressed body: \(detail)"
        case .truncated: return "truncated compressed body"
        case .zlib(let status): return "zlib error \(status)"
        }
    }
}
