import CZlib

/// One-shot gzip/zlib compression, for the SDK's uploads and the load generator.
public enum Deflater {
    /// Compresses `input` in the given framing; `level` is zlib's 0-9 (default 6).
    public static func compress(_ input: [UInt8], format: CompressionFormat, level: Int32 = 6) throws -> [UInt8] {
        var stream = z_stream()
        let status = czlib_deflate_init(&stream, level, format.windowBits)
        guard status == Z_OK else { throw CompressionError.zlib(status) }
        defer { deflateEnd(&stream) }
        let bound = Int(deflateBound(&stream, uLong(input.count))) + 32
        var output = [UInt8](repeating: 0, count: bound)
        let result: Int32 = input.withUnsafeBufferPointer { inBuf in
            output.withUnsafeMutableBufferPointer { outBuf in
                stream.next_in = UnsafeMutablePointer(mutating: inBuf.baseAddress)
                stream.avail_in = uInt(inBuf.count)
                stream.next_out = outBuf.baseAddress
                stream.avail_out = uInt(outBuf.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard result == Z_STREAM_END else { throw CompressionError.zlib(result) }
        output.removeLast(output.count - Int(stream.total_out))
        return output
    }
}
