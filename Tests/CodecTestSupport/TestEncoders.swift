import CBrotliEncoder
import CZstd

/// Test bodies in `br` and `zstd`, made by the same system libraries the server decodes with.
public enum TestEncoders {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// `plain` as one brotli stream.
    public static func brotli(_ plain: [UInt8], quality: Int32 = 5) throws -> [UInt8] {
        var size = BrotliEncoderMaxCompressedSize(plain.count)
        if size == 0 { size = plain.count + 1024 }
        var out = [UInt8](repeating: 0, count: size)
        let ok = plain.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                BrotliEncoderCompress(
                    quality, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC, input.count, input.baseAddress, &size,
                    output.baseAddress)
            }
        }
        guard ok == BROTLI_TRUE else { throw Failure(description: "BrotliEncoderCompress failed") }
        return Array(out.prefix(size))
    }

    /// `plain` as one zstd frame (content size recorded).
    public static func zstd(_ plain: [UInt8], level: Int32 = 3) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: ZSTD_compressBound(plain.count))
        let size = plain.withUnsafeBytes { input in
            out.withUnsafeMutableBytes { output in
                ZSTD_compress(output.baseAddress, output.count, input.baseAddress, input.count, level)
            }
        }
        guard ZSTD_isError(size) == 0 else { throw Failure(description: String(cString: ZSTD_getErrorName(size))) }
        return Array(out.prefix(size))
    }
}
