import CZstd
import CrashCompression

/// Streaming zstd (`Content-Encoding: zstd`, RFC 8878) decoding with a hard cap on output,
/// like ``Inflater``. Frames may be concatenated (as zstd(1) writes them); the window is
/// capped at 8 MiB (RFC 8878 section 7.2: the most an HTTP decoder must support), so a frame
/// that asks for more is refused instead of allocated, and a zstd bomb costs at most the
/// cap plus the window in memory.
final class ZstdDecoder: StreamDecoder {
    /// log2 of the largest window accepted: 8 MiB.
    static let windowLogMax: Int32 = 23
    private let stream: OpaquePointer
    private var out: CappedOutput
    /// True between frames: nothing fed yet, or the last frame ended with the last byte fed.
    private var atFrameBoundary = true
    private var fedAny = false

    init(maxOutputBytes: Int) throws {
        guard let stream = ZSTD_createDStream() else {
            throw CompressionError.corrupt("zstd decoder could not be created")
        }
        self.stream = stream
        out = CappedOutput(maxOutputBytes: maxOutputBytes)
        let status = ZSTD_DCtx_setParameter(stream, ZSTD_d_windowLogMax, Self.windowLogMax)
        if ZSTD_isError(status) != 0 {
            ZSTD_freeDStream(stream)
            throw CompressionError.corrupt(String(cString: ZSTD_getErrorName(status)))
        }
    }

    deinit { ZSTD_freeDStream(stream) }

    func feed(_ input: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        fedAny = true
        var inBuffer = ZSTD_inBuffer(src: base, size: input.count, pos: 0)
        while true {
            let consumedBefore = inBuffer.pos
            let (hint, count) = out.chunk.withUnsafeMutableBytes { buf -> (Int, Int) in
                var outBuffer = ZSTD_outBuffer(dst: buf.baseAddress, size: buf.count, pos: 0)
                let hint = ZSTD_decompressStream(stream, &outBuffer, &inBuffer)
                return (hint, outBuffer.pos)
            }
            if ZSTD_isError(hint) != 0 {
                throw CompressionError.corrupt(String(cString: ZSTD_getErrorName(hint)))
            }
            try out.emit(count, to: output)
            // 0: a frame ended and everything it decoded was flushed. A call that neither read
            // nor wrote anything (after output that exactly filled the buffer at a frame's end)
            // changes nothing: zstd then only hints at the next frame's header.
            if count > 0 || inBuffer.pos > consumedBefore { atFrameBoundary = hint == 0 }
            // A full output buffer may hold back more output; otherwise all input is consumed.
            if inBuffer.pos == inBuffer.size && count < out.chunk.count { return }
        }
    }

    func end() throws {
        guard fedAny, atFrameBoundary else { throw CompressionError.truncated }
    }
}
