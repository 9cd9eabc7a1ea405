import CBrotli
import CrashCompression

/// Streaming brotli (`Content-Encoding: br`, RFC 7932) decoding with a hard cap on output,
/// like ``Inflater``: decoding stops the moment the output would pass `maxOutputBytes`, so a
/// brotli bomb costs at most the cap (and the decoder's window, 16 MiB at most) in memory.
final class BrotliDecoder: StreamDecoder {
    private let state: OpaquePointer
    private var out: CappedOutput
    private var finished = false

    init(maxOutputBytes: Int) throws {
        guard let state = BrotliDecoderCreateInstance(nil, nil, nil) else {
            throw CompressionError.corrupt("brotli decoder could not be created")
        }
        self.state = state
        out = CappedOutput(maxOutputBytes: maxOutputBytes)
    }

    deinit { BrotliDecoderDestroyInstance(state) }

    func feed(_ input: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        guard !finished else { throw CompressionError.corrupt("data after end of stream") }
        var nextIn: UnsafePointer<UInt8>? = base.assumingMemoryBound(to: UInt8.self)
        var availIn = input.count
        while true {
            var availOut = out.chunk.count
            let result = out.chunk.withUnsafeMutableBufferPointer { buf -> BrotliDecoderResult in
                var nextOut: UnsafeMutablePointer<UInt8>? = buf.baseAddress
                return BrotliDecoderDecompressStream(state, &availIn, &nextIn, &availOut, &nextOut, nil)
            }
            try out.emit(out.chunk.count - availOut, to: output)
            switch result {
            case BROTLI_DECODER_RESULT_SUCCESS:
                finished = true
                guard availIn == 0 else { throw CompressionError.corrupt("data after end of stream") }
                return
            case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
                return
            case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
                continue
            default:
                let code = BrotliDecoderGetErrorCode(state)
                let message = BrotliDecoderErrorString(code).map { String(cString: $0) } ?? "invalid data"
                throw CompressionError.corrupt(message)
            }
        }
    }

    func end() throws {
        guard finished else { throw CompressionError.truncated }
    }
}
