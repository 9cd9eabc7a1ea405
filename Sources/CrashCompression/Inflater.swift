import CZlib

/// Streaming gzip/zlib inflate with a hard cap on output.
///
/// Feed compressed chunks as they arrive; inflation stops the moment the output would pass
/// `maxOutputBytes`, so a zip bomb costs at most the cap in memory and the time to produce
/// it. Concatenated gzip members are accepted, as gzip(1) does.
public final class Inflater {
    private let stream: UnsafeMutablePointer<z_stream>
    private let format: CompressionFormat
    private var output: [UInt8] = []
    private var out: CappedOutput
    private var finishedMember = false
    /// `.deflate` only: the first bytes, held until they tell a zlib stream from raw deflate.
    private var head: [UInt8]? = nil

    /// Creates an inflater that fails once more than `maxOutputBytes` would come out.
    public init(format: CompressionFormat, maxOutputBytes: Int) throws {
        self.format = format
        out = CappedOutput(maxOutputBytes: maxOutputBytes)
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let status = czlib_inflate_init(stream, format.windowBits)
        guard status == Z_OK else {
            stream.deallocate()
            throw CompressionError.zlib(status)
        }
        if format == .deflate { head = [] }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    /// Inflates one chunk of compressed input, keeping the output for ``finish()``.
    public func feed(_ input: UnsafeRawBufferPointer) throws {
        try feed(input) { self.output.append(contentsOf: $0) }
    }

    /// Inflates one chunk of compressed input and hands each piece of output (at most
    /// 64 KiB, valid only during the call) to `output` instead of keeping it: a streaming
    /// consumer holds only what it decides to keep. An error thrown by `output` stops
    /// inflation and is rethrown as it is. End the stream with ``end()``.
    public func feed(_ input: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        if var held = head {
            // `Content-Encoding: deflate` is meant to be a zlib stream (RFC 9110), but
            // clients also send raw deflate: a first two bytes that are no zlib header
            // (RFC 1950: method 8, window <= 32K, check bits) mean raw deflate.
            let earlier = held.count
            held.append(contentsOf: input.prefix(2 - held.count))
            guard held.count == 2 else {
                head = held
                return
            }
            head = nil
            let isZlib = held[0] & 0x0F == 8 && held[0] >> 4 <= 7 && (UInt16(held[0]) << 8 | UInt16(held[1])) % 31 == 0
            if !isZlib {
                let status = inflateReset2(stream, -15)
                guard status == Z_OK else { throw CompressionError.zlib(status) }
            }
            // Replay the held bytes that came in earlier chunks, then this chunk whole.
            if earlier > 0 { try Array(held.prefix(earlier)).withUnsafeBytes { try feed($0, output: output) } }
        }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        defer {
            stream.pointee.next_in = nil
            stream.pointee.avail_in = 0
        }
        while stream.pointee.avail_in > 0 {
            if finishedMember {
                // Another gzip member follows (or trailing garbage, which inflate rejects).
                guard format == .gzip else { throw CompressionError.corrupt("data after end of stream") }
                inflateReset(stream)
                finishedMember = false
            }
            let status = try pump(output)
            if status == Z_STREAM_END { finishedMember = true }
        }
    }

    /// Inflates a whole contiguous input.
    public func feed(_ input: [UInt8]) throws {
        try input.withUnsafeBytes { try feed($0) }
    }

    /// Ends the stream and returns everything inflated; throws if it was cut short.
    public func finish() throws -> [UInt8] {
        try end()
        return output
    }

    /// Ends a stream fed through ``feed(_:output:)``; throws if it was cut short.
    public func end() throws {
        // One byte in all (`.deflate` still holding its first byte): too short for either form.
        if let held = head, !held.isEmpty { throw CompressionError.truncated }
        guard finishedMember else { throw CompressionError.truncated }
    }

    /// Runs inflate until it needs more input or ends a member.
    private func pump(_ emit: (UnsafeBufferPointer<UInt8>) throws -> Void) throws -> Int32 {
        while true {
            let status: Int32 = out.chunk.withUnsafeMutableBufferPointer { buf in
                stream.pointee.next_out = buf.baseAddress
                stream.pointee.avail_out = uInt(buf.count)
                return CZlib.inflate(stream, Z_NO_FLUSH)
            }
            try out.emit(out.chunk.count - Int(stream.pointee.avail_out), to: emit)
            switch status {
            case Z_STREAM_END:
                return status
            case Z_OK:
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 { return status }
            case Z_BUF_ERROR:
                // No progress possible: input exhausted mid-stream.
                return Z_OK
            case Z_DATA_ERROR, Z_NEED_DICT:
                let message = stream.pointee.msg.map { String(cString: $0) } ?? "invalid data"
                throw CompressionError.corrupt(message)
            default:
                throw CompressionError.zlib(status)
            }
        }
    }
}

extension Inflater {
    /// Inflates a complete buffer in one call.
    public static func inflate(_ input: [UInt8], format: CompressionFormat, maxOutputBytes: Int) throws -> [UInt8] {
        let inflater = try Inflater(format: format, maxOutputBytes: maxOutputBytes)
        try inflater.feed(input)
        return try inflater.finish()
    }
}
