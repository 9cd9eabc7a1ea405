#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The texts this thread's last normalizations proved to be fixed points
/// (``Normalizer/isFixedPoint(_:frameMode:)``), so that the proof is not redone for a text
/// seen before.
///
/// Occurrences of one bug normalize to the same reason and the same frames: that is what
/// grouping is for. The proof reads its text token by token (about 30 instructions a byte,
/// a third of a pass); finding the text here costs a hash and a compare (about 2 a byte).
/// The verdict depends on the text and `frameMode` only (not on the rules: see
/// `isFixedPoint`), and an entry holds both whole, so a hit answers exactly what the proof
/// would. Only proofs that succeeded are kept.
///
/// Per thread, so that no lock is taken and no entry is shared: 512 entries of up to 240
/// bytes (128 KiB a thread, freed with the thread), each text in the entry its hash selects
/// (a newer text replaces an older one). Longer texts are always proved.
enum FixedPointMemo {
    static let entryCount = 512
    static let entryBytes = 256
    /// Entry layout: the hash (8 bytes), the length (2), `frameMode` (1), 5 unused, the text.
    static let textOffset = 16
    static let longestText = entryBytes - textOffset

    /// `isFixedPoint(text, frameMode:)`, answered from this thread's memo when it holds `text`.
    static func isFixedPoint(_ text: UnsafeBufferPointer<UInt8>, frameMode: Bool) -> Bool {
        let n = text.count
        guard n > 0, n <= longestText, let p = text.baseAddress, let memo = storage() else {
            return Normalizer.isFixedPoint(text, frameMode: frameMode)
        }
        let hash = PatternSet.hash(p, n) &+ (frameMode ? 1 : 0)
        let entry = memo + entryBytes * Int(truncatingIfNeeded: (hash ^ hash >> 32) & UInt64(entryCount - 1))
        let flag: UInt8 = frameMode ? 1 : 0
        if entry.load(as: UInt64.self) == hash && Int(entry.load(fromByteOffset: 8, as: UInt16.self)) == n
            && entry.load(fromByteOffset: 10, as: UInt8.self) == flag
            && Bytes.equal(entry.assumingMemoryBound(to: UInt8.self) + textOffset, p, n)
        {
            return true
        }
        guard Normalizer.isFixedPoint(text, frameMode: frameMode) else { return false }
        entry.storeBytes(of: hash, as: UInt64.self)
        entry.storeBytes(of: UInt16(n), toByteOffset: 8, as: UInt16.self)
        entry.storeBytes(of: flag, toByteOffset: 10, as: UInt8.self)
        (entry + textOffset).copyMemory(from: p, byteCount: n)
        return true
    }

    /// This thread's memo (zeroed on first use: length 0 matches no text), or nil when
    /// none can be made.
    @inline(__always) private static func storage() -> UnsafeMutableRawPointer? {
        guard let key else { return nil }
        if let memo = pthread_getspecific(key) { return memo }
        guard let memo = calloc(entryCount, entryBytes) else { return nil }
        guard pthread_setspecific(key, memo) == 0 else {
            free(memo)
            return nil
        }
        return memo
    }

    /// The thread-specific key, with `free` as the destructor run when a thread ends (nil
    /// when the system has no key left: every text is then proved).
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, { free($0) }) == 0 ? key : nil
    }()
}
