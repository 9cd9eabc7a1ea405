import CrashWire
import Crypto

/// The crash-group signature of a report, grouping version ``Grouping/version``.
public struct Signature: Sendable, Hashable {
    /// Lowercase hex SHA-256: the group's key within a project.
    public var hash: String
    /// The normalized reason (also when a fingerprint decides the group).
    public var normalizedReason: String
    /// First line of the normalized reason, cut at 200 characters.
    public var title: String
}

/// Grouping v1: normalizes reasons and frames, and derives signatures from them.
///
/// The rules are written down, with every decision the contract leaves open, in
/// `docs/grouping.md`. Normalization is one hand-written pass over UTF-8 bytes: linear in
/// the input, idempotent, and total (it never traps, whatever the text).
public enum Grouping {
    /// Stored with every group; a change to the rules is a new version.
    public static let version = "v1"

    /// Longest title, in characters.
    public static let titleLimit = 200

    /// How many normalized frames a `signal` or `exception` signature includes.
    public static let signatureFrameCount = 3

    /// Removes what varies between occurrences of one bug and keeps what names it.
    public static func normalize(reason: String) -> String {
        Normalizer.normalize(reason, frameMode: false)
    }

    /// Normalizes one stack frame: drops frame index, addresses and offsets.
    public static func normalize(frame: String) -> String {
        Normalizer.normalize(frame, frameMode: true)
    }

    /// The group title: the first line of the normalized reason, cut at 200 characters.
    public static func title(normalizedReason: String) -> String {
        let firstLine = normalizedReason.prefix { $0 != "\n" && $0 != "\r" && $0 != "\r\n" }
        return String(firstLine.prefix(titleLimit))
    }

    /// The v1 signature of a report's grouping fields.
    ///
    /// SHA-256 over length-prefixed parts: `v1`, the kind, then either `fingerprint` and the
    /// parts as sent, or `reason`, the normalized reason and, for `signal` and `exception`
    /// with a non-empty stack, the first three normalized frames. An empty fingerprint is
    /// treated as absent (the contract requires 1 to 8 parts).
    public static func signature(kind: ReportKind, reason: String, stack: [String]?, fingerprint: [String]?) -> Signature {
        var hasher = SHA256()
        func add(_ text: String) {
            var text = text
            var count = UInt32(text.utf8.count).bigEndian
            withUnsafeBytes(of: &count) { hasher.update(bufferPointer: $0) }
            text.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        }
        add(version)
        add(kind.rawValue)
        let normalized = normalize(reason: reason)
        if let fingerprint, !fingerprint.isEmpty {
            add("fingerprint")
            fingerprint.forEach(add)
        } else {
            add("reason")
            add(normalized)
            if kind == .signal || kind == .exception, let stack, !stack.isEmpty {
                for frame in stack.prefix(signatureFrameCount) { add(normalize(frame: frame)) }
            }
        }
        return Signature(hash: hex(hasher.finalize()), normalizedReason: normalized, title: title(normalizedReason: normalized))
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: SHA256.byteCount * 2) { buffer in
            var i = 0
            digest.withUnsafeBytes { bytes in
                for byte in bytes {
                    buffer[i] = digits.utf8Start[Int(byte >> 4)]
                    buffer[i + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    i += 2
                }
            }
            return i
        }
    }
}
