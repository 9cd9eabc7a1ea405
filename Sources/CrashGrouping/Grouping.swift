import CrashWire
import Crypto

/// The crash-group signature of a report under one grouping version.
public struct Signature: Sendable, Hashable {
    /// Lowercase hex SHA-256: the group's key within a project. The version is the first
    /// part hashed, so signatures of two versions never collide.
    public var hash: String
    /// The normalized reason (also when a fingerprint decides the group).
    public var normalizedReason: String
    /// First line of the normalized reason, cut at 200 characters.
    public var title: String
    /// The grouping version that made this signature (stored with the group).
    public var version: GroupingVersion
}

/// Normalizes reasons and frames, and derives signatures from them, for each grouping
/// version (``GroupingVersion``).
///
/// The rules are written down, with every decision the contract leaves open, in
/// `docs/grouping.md`. Normalization is one hand-written pass over UTF-8 bytes: linear in
/// the input, idempotent, and total (it never traps, whatever the text).
public enum Grouping {
    /// Longest title, in characters.
    public static let titleLimit = 200

    /// How many normalized frames a signature includes (v1: of `signal` and `exception`
    /// stacks; v2: the first app frames of any stack).
    public static let signatureFrameCount = 3

    /// Removes what varies between occurrences of one bug and keeps what names it (v1's rules).
    public static func normalize(reason: String) -> String {
        normalize(reason: reason, version: .v1)
    }

    /// Normalizes one stack frame with v1's rules: drops frame index, addresses and offsets.
    public static func normalize(frame: String) -> String {
        normalize(frame: frame, version: .v1)
    }

    /// Removes what varies between occurrences of one bug and keeps what names it.
    public static func normalize(reason: String, version: GroupingVersion) -> String {
        Normalizer.normalize(reason, frameMode: false, rules: version.normalizerRules)
    }

    /// Normalizes one stack frame: drops frame index, addresses and offsets. From v2 on, a
    /// frame's mark (` [app]`, ` [system]`) is not part of its text.
    public static func normalize(frame: String, version: GroupingVersion) -> String {
        switch version {
        case .v1:
            return Normalizer.normalize(frame, frameMode: true, rules: .v1)
        case .v2:
            let length = FrameClassifier.unmarkedLength(frame)
            let text = length == frame.utf8.count ? frame : String(Substring(frame.utf8.prefix(length)))
            return Normalizer.normalize(text, frameMode: true, rules: .v2)
        }
    }

    /// The group title: the first line of the normalized reason, cut at 200 characters.
    public static func title(normalizedReason: String) -> String {
        // ASCII without a carriage return (normalized text never has one): every byte is a
        // character, so the first line and the cut are found on the bytes.
        let fast: String? =
            normalizedReason.utf8.withContiguousStorageIfAvailable { bytes in
                var end = 0
                while end < bytes.count && end < titleLimit {
                    let b = bytes[end]
                    if b >= 0x80 || b == Bytes.carriageReturn { return nil }
                    if b == Bytes.newline { break }
                    end += 1
                }
                if end == titleLimit && end < bytes.count && bytes[end] >= 0x80 { return nil }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
            } ?? nil
        if let fast { return fast }
        let firstLine = normalizedReason.prefix { $0 != "\n" && $0 != "\r" && $0 != "\r\n" }
        return String(firstLine.prefix(titleLimit))
    }

    /// The frames a v2 signature is made of, by index into `stack`: the first three app
    /// frames, skipping the machinery; without an app frame, the first three frames that
    /// are not machinery. See `docs/grouping.md`, "Frame selection".
    public static func signatureFrames(_ stack: [String]) -> [(index: Int, length: Int)] {
        var app: [(index: Int, length: Int)] = []
        var fallback: [(index: Int, length: Int)] = []
        app.reserveCapacity(signatureFrameCount)
        fallback.reserveCapacity(signatureFrameCount)
        for (index, frame) in stack.enumerated() {
            var frame = frame
            // A system frame's machinery lookup matters only while the fallback is not full.
            let needed = fallback.count < signatureFrameCount && app.isEmpty
            let (role, length) = frame.withUTF8 { FrameClassifier.classify(bytes: $0, machineryInSystem: needed) }
            switch role {
            case .app:
                app.append((index, length))
                if app.count == signatureFrameCount { return app }
            case .system:
                if fallback.count < signatureFrameCount { fallback.append((index, length)) }
            case .machinery:
                break
            }
        }
        return app.isEmpty ? fallback : app
    }

    /// The signature of a report's grouping fields under `version`.
    ///
    /// SHA-256 over length-prefixed parts: the version, the kind, then either `fingerprint`
    /// and the parts as sent, or `reason`, the normalized reason and the frames: v1 adds,
    /// for `signal` and `exception` with a non-empty stack, the first three normalized
    /// frames; v2 adds, for every kind, the normalized frames of ``signatureFrames(_:)``.
    /// An empty fingerprint is treated as absent (the contract requires 1 to 8 parts).
    public static func signature(
        kind: ReportKind, reason: String, stack: [String]?, fingerprint: [String]?, version: GroupingVersion
    ) -> Signature {
        var hasher = SHA256()
        func add(bytes: UnsafeBufferPointer<UInt8>) {
            var count = UInt32(bytes.count).bigEndian
            withUnsafeBytes(of: &count) { hasher.update(bufferPointer: $0) }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
        }
        func add(_ text: String) {
            var text = text
            text.withUTF8 { add(bytes: $0) }
        }
        // A frame's normalized bytes go into the hash as they are: no `String` per frame.
        func add(frame: String, length: Int) {
            var frame = frame
            frame.withUTF8 { all in
                let src = UnsafeBufferPointer(rebasing: all[..<min(length, all.count)])
                Normalizer.normalizedBytes(src, frameMode: true, rules: rules).withUnsafeBufferPointer { add(bytes: $0) }
            }
        }
        let rules = version.normalizerRules
        add(version.rawValue)
        add(kind.rawValue)
        let normalized = Normalizer.normalize(reason, frameMode: false, rules: rules)
        if let fingerprint, !fingerprint.isEmpty {
            add("fingerprint")
            fingerprint.forEach(add)
        } else {
            add("reason")
            add(normalized)
            if let stack, !stack.isEmpty {
                switch version {
                case .v1:
                    if kind == .signal || kind == .exception {
                        for frame in stack.prefix(signatureFrameCount) { add(frame: frame, length: .max) }
                    }
                case .v2:
                    for (index, length) in signatureFrames(stack) { add(frame: stack[index], length: length) }
                }
            }
        }
        return Signature(
            hash: hex(hasher.finalize()), normalizedReason: normalized, title: title(normalizedReason: normalized),
            version: version)
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
