import CrashWire
import Crypto

/// The crash-group signature of a report, grouping version ``Grouping/version``.
public struct Signature: Sendable, Hashable {
    /// Lowercase hex SHA-256: the group's key within a project.
    public var hash: String
    /// The normalized reason (or the fingerprint parts joined by newlines).
    public var normalizedReason: String
    /// First line of the normalized reason, cut at 200 characters.
    public var title: String
}

/// Grouping v1: normalizes reasons and frames, and derives signatures from them.
///
/// PLACEHOLDER: the grouping issue replaces the bodies of `normalize(reason:)` and
/// `normalize(frame:)` with the full v1 rules.
public enum Grouping {
    /// Stored with every group; a change to the rules is a new version.
    public static let version = "v1"

    /// Longest title, in characters.
    public static let titleLimit = 200

    /// Removes what varies between occurrences of one bug and keeps what names it.
    public static func normalize(reason: String) -> String {
        reason
    }

    /// Normalizes one stack frame: drops frame index, addresses and offsets.
    public static func normalize(frame: String) -> String {
        frame
    }

    /// The group title: the first line of the normalized reason, cut at 200 characters.
    public static func title(normalizedReason: String) -> String {
        let firstLine = normalizedReason.prefix { $0 != "\n" && $0 != "\r" }
        return String(firstLine.prefix(titleLimit))
    }

    /// The v1 signature of a report's grouping fields.
    public static func signature(kind: ReportKind, reason: String, stack: [String]?, fingerprint: [String]?) -> Signature {
        var hasher = SHA256()
        func add(_ text: String) {
            var count = UInt32(text.utf8.count).bigEndian
            withUnsafeBytes(of: &count) { hasher.update(bufferPointer: $0) }
            hasher.update(data: Array(text.utf8))
        }
        add(version)
        add(kind.rawValue)
        let normalized: String
        if let fingerprint {
            add("fingerprint")
            fingerprint.forEach(add)
            normalized = normalize(reason: reason)
        } else {
            add("reason")
            normalized = normalize(reason: reason)
            add(normalized)
            if kind == .signal || kind == .exception, let stack, !stack.isEmpty {
                for frame in stack.prefix(3) { add(normalize(frame: frame)) }
            }
        }
        let digest = hasher.finalize()
        let hex = digest.map { byte in
            let s = String(byte, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
        return Signature(hash: hex, normalizedReason: normalized, title: title(normalizedReason: normalized))
    }
}
