#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Bytes appended at the end and read in place, grown with `realloc`: the decoded body as the
/// ingest pipeline keeps it (``IngestBodyReader``).
///
/// An array grows by allocating twice its capacity and copying into it, so at the moment a
/// 16 MiB body outgrows its storage the old and the new copy are both resident: up to twice
/// what the body budget counts, for each body being read (`heaptrack`: 55 MB of arrays
/// allocated by the scanner at the peak of the largest bodies x 64; docs/performance.md). glibc grows a block that has a mapping of its own (256 KiB and up, as the
/// server sets its allocator) with `mremap`, which moves page-table entries instead of bytes;
/// the capacity past `count` is address space that nothing has touched, not memory.
struct GrowingBytes: ~Copyable {
    private var base: UnsafeMutablePointer<UInt8>?
    /// Bytes appended so far.
    private(set) var count = 0
    private var capacity = 0

    init() {}

    deinit { free(base) }

    mutating func append(contentsOf bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        if count + bytes.count > capacity { grow(toHold: count + bytes.count) }
        (base! + count).initialize(from: source, count: bytes.count)
        count += bytes.count
    }

    /// The bytes of `range` copied out.
    subscript(range: Range<Int>) -> [UInt8] {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "range within the bytes")
        return withUnsafeBufferPointer { Array($0[range]) }
    }

    func withUnsafeBufferPointer<R, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> R) throws(E) -> R {
        try body(UnsafeBufferPointer(start: base, count: count))
    }

    private mutating func grow(toHold needed: Int) {
        let grown = max(needed, capacity * 2, 4096)
        guard let memory = realloc(base, grown) else { fatalError("out of memory growing a body to \(grown) bytes") }
        base = memory.assumingMemoryBound(to: UInt8.self)
        capacity = grown
    }
}
