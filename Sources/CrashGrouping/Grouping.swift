import CPrefetch
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
            return Bytes.withUTF8(frame) { all in
                let src = UnsafeBufferPointer(rebasing: all[..<FrameClassifier.unmarkedLength(bytes: all)])
                return Normalizer.withNormalizedBytes(src, frameMode: true, rules: .v2) { String(decoding: $0, as: UTF8.self) }
            }
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
        var frames: [(index: Int, length: Int)] = []
        selectFrames(stack).forEach { frames.append(($0, $1)) }
        return frames
    }

    /// Up to `signatureFrameCount` frames, by index and length, without an array.
    struct SelectedFrames {
        private(set) var count = 0
        private var first = (index: 0, length: 0)
        private var second = (index: 0, length: 0)
        private var third = (index: 0, length: 0)

        var isFull: Bool { count == Grouping.signatureFrameCount }

        mutating func append(_ index: Int, _ length: Int) {
            switch count {
            case 0: first = (index, length)
            case 1: second = (index, length)
            default: third = (index, length)
            }
            count += 1
        }

        func forEach(_ body: (_ index: Int, _ length: Int) -> Void) {
            if count > 0 { body(first.index, first.length) }
            if count > 1 { body(second.index, second.length) }
            if count > 2 { body(third.index, third.length) }
        }
    }

    /// ``signatureFrames(_:)`` without an array: what the signature reads.
    static func selectFrames<Stack: FrameSource>(_ stack: Stack) -> SelectedFrames {
        let memo = ImageMemo.forThisThread()
        return selectFrames(stack, FrameClassifier.tables, memo)
    }

    private static func selectFrames<Stack: FrameSource>(
        _ stack: Stack, _ tables: FrameClassifier.Tables, _ memo: ImageMemo
    ) -> SelectedFrames {
        var app = SelectedFrames()
        var fallback = SelectedFrames()
        for index in 0..<stack.count {
            // A system frame's machinery lookup matters only while the fallback is not full.
            let needed = !fallback.isFull && app.count == 0
            let (role, length) = stack.withFrame(index) {
                FrameClassifier.classify(bytes: $0, machineryInSystem: needed, tables: tables, memo: memo)
            }
            switch role {
            case .app:
                app.append(index, length)
                if app.isFull { return app }
            case .system:
                if !fallback.isFull { fallback.append(index, length) }
            case .machinery:
                break
            }
        }
        return app.count == 0 ? fallback : app
    }

    /// The signature of a report's grouping fields under `version`.
    ///
    /// SHA-256 over length-prefixed parts: the version, the kind, then either `fingerprint`
    /// and the parts as sent, or `reason`, the normalized reason and the frames: v1 adds,
    /// for `signal` and `exception` with a non-empty stack, the first three normalized
    /// frames; v2 adds, for every kind, the normalized frames of ``signatureFrames(_:)``.
    /// An empty fingerprint is treated as absent (the contract requires 1 to 8 parts).
    ///
    /// The parts are written back to back into one buffer (on the stack for a typical
    /// report), hashed with one `update`: frames go in as the normalizer writes them,
    /// without a `String` per frame.
    public static func signature(
        kind: ReportKind, reason: String, stack: [String]?, fingerprint: [String]?, version: GroupingVersion
    ) -> Signature {
        let usesFingerprint = fingerprint.map { !$0.isEmpty } ?? false
        if version == .v2, !usesFingerprint, let stack { prefetchFrames(stack) }
        return sign(kind: kind, reason: reason, stack: stack, fingerprint: fingerprint, version: version)
    }

    /// ``signature(kind:reason:stack:fingerprint:version:)`` of a stack whose frames are
    /// UTF-8 text in the caller's memory (an ingest body's bytes): the same signature as of
    /// the same frames as `String`s, without making one per frame.
    public static func signature(
        kind: ReportKind, reason: String, frames: UnsafeBufferPointer<UnsafeBufferPointer<UInt8>>?,
        fingerprint: [String]?, version: GroupingVersion
    ) -> Signature {
        sign(kind: kind, reason: reason, stack: frames, fingerprint: fingerprint, version: version)
    }

    private static func sign<Stack: FrameSource>(
        kind: ReportKind, reason: String, stack: Stack?, fingerprint: [String]?, version: GroupingVersion
    ) -> Signature {
        let rules = version.normalizerRules
        let usesFingerprint = fingerprint.map { !$0.isEmpty } ?? false
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024) { scratch in
            var message = SignatureMessage(buffer: OutputBuffer(borrowing: scratch), version: version)
            defer { message.buffer.release() }
            message.add(version.rawValue)
            message.add(kind.rawValue)
            var normalized = ""
            var titleIsWhole = false
            Bytes.withUTF8(reason) { src in
                Normalizer.withNormalizedBytes(src, frameMode: false, rules: rules) { bytes in
                    normalized = String(decoding: bytes, as: UTF8.self)
                    titleIsWhole = bytes.count <= titleLimit && Bytes.isOneASCIILine(bytes)
                    if !usesFingerprint {
                        message.add("reason")
                        message.add(bytes: bytes)
                    }
                }
            }
            if usesFingerprint, let fingerprint {
                message.add("fingerprint")
                for part in fingerprint { message.add(part) }
            } else if let stack, stack.count > 0 {
                switch version {
                case .v1:
                    if kind == .signal || kind == .exception {
                        for index in 0..<min(stack.count, signatureFrameCount) {
                            stack.withFrame(index) { message.add(frame: $0, length: .max) }
                        }
                    }
                case .v2:
                    selectFrames(stack).forEach { index, length in
                        stack.withFrame(index) { message.add(frame: $0, length: length) }
                    }
                }
            }
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(message.buffer.bytes))
            return Signature(
                hash: hex(hasher.finalize()), normalizedReason: normalized,
                // Text of one ASCII line within the limit is its own title (the same string).
                title: titleIsWhole ? normalized : title(normalizedReason: normalized), version: version)
        }
    }

    /// The bytes a signature hashes: length-prefixed parts, back to back. A value with
    /// mutating methods rather than functions nested in ``signature(kind:reason:stack:fingerprint:version:)``:
    /// a variable those capture is checked for exclusive access at run time, at every write
    /// (about 4 % of a v2 signature).
    struct SignatureMessage {
        var buffer: OutputBuffer
        let version: GroupingVersion

        mutating func addLength(_ n: Int) {
            let count = UInt32(truncatingIfNeeded: n)
            buffer.append(UInt8(truncatingIfNeeded: count >> 24))
            buffer.append(UInt8(truncatingIfNeeded: count >> 16))
            buffer.append(UInt8(truncatingIfNeeded: count >> 8))
            buffer.append(UInt8(truncatingIfNeeded: count))
        }

        mutating func add(bytes: UnsafeBufferPointer<UInt8>) {
            addLength(bytes.count)
            buffer.append(bytes)
        }

        mutating func add(_ text: String) { Bytes.withUTF8(text) { add(bytes: $0) } }

        /// A frame's normalized text (its first `length` bytes: without its mark).
        mutating func add(frame all: UnsafeBufferPointer<UInt8>, length: Int) {
            let src = UnsafeBufferPointer(rebasing: all[..<min(length, all.count)])
            if version == .v2, addAppleFrame(src) { return }
            Normalizer.withNormalizedBytes(src, frameMode: true, rules: version.normalizerRules) { add(bytes: $0) }
        }

        /// An Apple frame whose image and symbol make a fixed point: that text is its
        /// normalization (``Normalizer/appleFrameParts(_:)``), written without a pass.
        mutating func addAppleFrame(_ src: UnsafeBufferPointer<UInt8>) -> Bool {
            guard let (image, symbol) = Normalizer.appleFrameParts(src), let p = src.baseAddress else { return false }
            let start = buffer.count
            addLength(image.count + 1 + symbol.count)
            buffer.append(p + image.lowerBound, count: image.count)
            buffer.append(Bytes.space)
            buffer.append(p + symbol.lowerBound, count: symbol.count)
            let text = UnsafeBufferPointer(rebasing: buffer.bytes[(start + 4)...])
            guard FixedPointMemo.isFixedPoint(text, frameMode: true) else {
                buffer.count = start
                return false
            }
            assert(
                Normalizer.withNormalizedBytes(src, frameMode: true, rules: version.normalizerRules) { $0.elementsEqual(text) },
                "the Apple-frame shortcut differs from a pass: \(String(decoding: src, as: UTF8.self))")
            return true
        }
    }

    /// Frames whose text ``prefetchFrames(_:)`` asks for: more than a selection reads in
    /// a typical stack (its first three app frames come within the first 20).
    static let prefetchedFrameCount = 24

    /// Asks the processor for the text of the first frames while the reason is normalized.
    ///
    /// The signature reads frames one after another, and the first read of each (the retain
    /// of its storage) waits for memory: over a batch of distinct reports the frames are out
    /// of the core's cache, and the retain's atomic increment stalls the reads behind it.
    /// Loaded during the reason's normalization, they are in cache when selected.
    ///
    /// A native string keeps its storage object's address in the low 60 bits of its second
    /// word (the standard library's `_StringObject`), the text 32 bytes in; a small string
    /// holds its bytes there instead. A prefetch is a hint that never faults and changes no
    /// result, so a layout other than this one costs only the hint.
    @inline(__always)
    static func prefetchFrames(_ stack: [String]) {
        // The layout read here is the 64-bit one (a 16-byte `String`); elsewhere, no hint.
        guard MemoryLayout<String>.size == MemoryLayout<(UInt64, UInt64)>.size else { return }
        stack.withUnsafeBufferPointer { frames in
            for frame in frames.prefix(prefetchedFrameCount) {
                let (_, object) = unsafeBitCast(frame, to: (UInt64, UInt64).self)
                guard let storage = UnsafeRawPointer(bitPattern: UInt(object & 0x0FFF_FFFF_FFFF_FFFF)) else { continue }
                cg_prefetch(storage)
                cg_prefetch(storage + 64)
                cg_prefetch(storage + 128)
            }
        }
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

/// A stack's frames as the signature reads them: by index, each as its UTF-8 bytes.
protocol FrameSource {
    var count: Int { get }
    func withFrame<R>(_ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R
}

extension Array: FrameSource where Element == String {
    /// In place (no copy, no retain) for a native string; through a copy otherwise.
    @inline(__always) func withFrame<R>(_ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        Bytes.withUTF8(self[index], body)
    }
}

extension UnsafeBufferPointer: FrameSource where Element == UnsafeBufferPointer<UInt8> {
    @inline(__always) func withFrame<R>(_ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        body(self[index])
    }
}
