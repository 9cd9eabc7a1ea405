/// The output side of a capped streaming decoder (``Inflater``, and the server's brotli and
/// zstd decoders): a buffer the codec writes into, handed on piece by piece, and the
/// cap on the total: decoding stops the moment the output would pass `maxOutputBytes`, so a
/// bomb costs at most the cap in memory whatever its format.
package struct CappedOutput {
    package let maxOutputBytes: Int
    private var produced = 0
    /// Where the codec writes its output; ``emit(_:to:)`` hands the first bytes on. Left
    /// uninitialized: only bytes the codec wrote are read, and zeroing 64 KiB for every
    /// request (a fresh allocation each time, page faults included) was about 1.6 % of the
    /// server's CPU per single-report request (docs/performance.md).
    package var chunk: [UInt8]

    /// `chunkSize` is the most the codec writes per call: 64 KiB by default; igzip, which keeps
    /// its own history, is as fast with 8 KiB (``GzipDecoder``).
    package init(maxOutputBytes: Int, chunkSize: Int = 64 * 1024) {
        self.maxOutputBytes = maxOutputBytes
        chunk = [UInt8](unsafeUninitializedCapacity: chunkSize) { _, count in count = chunkSize }
    }

    /// Hands the first `count` bytes of ``chunk`` (valid only during the call) to `output`,
    /// or throws `outputLimitExceeded` when they would take the total past the cap.
    package mutating func emit(_ count: Int, to output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard count > 0 else { return }
        guard produced + count <= maxOutputBytes else {
            throw CompressionError.outputLimitExceeded(limit: maxOutputBytes)
        }
        produced += count
        try chunk.withUnsafeBufferPointer { try output(UnsafeBufferPointer(rebasing: $0[0..<count])) }
    }
}
