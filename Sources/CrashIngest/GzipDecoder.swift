import CIsal
import CrashCompression

/// Streaming gzip decoding (`Content-Encoding: gzip`, RFC 1952) through ISA-L's igzip, with a
/// hard cap on output like ``Inflater``: the same decisions as zlib (a differential test holds
/// them together), about 2.5 times zlib's speed on crash reports and 5 times on a zip bomb,
/// which is what the cap makes every bomb cost (docs/performance.md).
///
/// Concatenated members are accepted, as gzip(1) does; each member's CRC-32 and length are
/// checked by igzip. Each member's header is read here (``GzipHeaderReader``): igzip 2.30
/// ignores reserved flags, which RFC 1952 asks a decoder to refuse, and miscomputes the
/// header CRC when the header comes in more than one piece.
final class GzipDecoder: StreamDecoder {
    private let state: UnsafeMutablePointer<inflate_state>
    private var out: CappedOutput
    private var header = GzipHeaderReader()
    private var finishedMember = false

    init(maxOutputBytes: Int) {
        // igzip's state is 87 KiB, all of it written while a body is read (zlib's about 40):
        // a small output buffer keeps each body's decoder no larger than zlib's was, at the
        // same speed (igzip copies its history into its own state between calls).
        out = CappedOutput(maxOutputBytes: maxOutputBytes, chunkSize: 8 * 1024)
        state = .allocate(capacity: 1)
        isal_inflate_init(state)
        state.pointee.crc_flag = UInt32(ISAL_GZIP_NO_HDR_VER)
    }

    deinit { state.deallocate() }

    func feed(_ input: UnsafeRawBufferPointer, output: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        // igzip counts input in 32 bits; a request body chunk is far smaller, but take no chances.
        let slice = Int(UInt32.max)
        if input.count > slice {
            for start in stride(from: 0, to: input.count, by: slice) {
                try feed(UnsafeRawBufferPointer(rebasing: input[start..<min(start + slice, input.count)]), output: output)
            }
            return
        }
        var next = base.assumingMemoryBound(to: UInt8.self)
        var available = input.count
        defer {
            state.pointee.next_in = nil
            state.pointee.avail_in = 0
        }
        while available > 0 {
            if finishedMember {
                // Another member follows (or trailing garbage, which its header check refuses).
                isal_inflate_reset(state)
                state.pointee.crc_flag = UInt32(ISAL_GZIP_NO_HDR_VER)
                header = GzipHeaderReader()
                finishedMember = false
            }
            if !header.isComplete {
                let used = try header.read(UnsafeBufferPointer(start: next, count: available))
                next += used
                available -= used
                continue
            }
            state.pointee.next_in = UnsafeMutablePointer(mutating: next)
            state.pointee.avail_in = UInt32(available)
            try pump(output)
            // igzip hands back what follows a member's trailer.
            next = UnsafePointer(state.pointee.next_in)
            available = Int(state.pointee.avail_in)
        }
    }

    func end() throws {
        guard finishedMember else { throw CompressionError.truncated }
    }

    /// Runs igzip until it needs more input or ends a member.
    private func pump(_ emit: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        while true {
            let availableBefore = state.pointee.avail_in
            let status: Int32 = out.chunk.withUnsafeMutableBufferPointer { buffer in
                state.pointee.next_out = buffer.baseAddress
                state.pointee.avail_out = UInt32(buffer.count)
                return isal_inflate(state)
            }
            let produced = out.chunk.count - Int(state.pointee.avail_out)
            try out.emit(produced, to: emit)
            guard status >= 0, status != ISAL_NEED_DICT else { throw CompressionError.corrupt(Self.describe(status)) }
            if state.pointee.block_state == ISAL_BLOCK_FINISH {
                finishedMember = true
                return
            }
            if state.pointee.avail_in == 0 && produced < out.chunk.count { return }
            // Neither input read nor output written: igzip would loop here for ever.
            if produced == 0 && state.pointee.avail_in == availableBefore {
                throw CompressionError.corrupt("gzip decoder made no progress")
            }
        }
    }

    private static func describe(_ status: Int32) -> String {
        switch status {
        case ISAL_INVALID_BLOCK: return "invalid deflate block"
        case ISAL_INVALID_SYMBOL: return "invalid deflate symbol"
        case ISAL_INVALID_LOOKBACK: return "invalid distance too far back"
        case ISAL_INCORRECT_CHECKSUM: return "incorrect data check"
        default: return "igzip error \(status)"
        }
    }
}

/// A gzip member's header (RFC 1952 2.3), read as it arrives in pieces of any size: the magic
/// bytes, method 8 (deflate), no reserved flag, and the optional extra field, file name,
/// comment and header CRC, which must match.
struct GzipHeaderReader {
    private enum Part {
        case fixed, extraLength, extra(remaining: Int), name, comment, headerCRC, done
    }

    private static let fixedLength = 10
    private static let (headerCRCFlag, extraFlag, nameFlag, commentFlag): (UInt8, UInt8, UInt8, UInt8) = (0x02, 0x04, 0x08, 0x10)

    private var part = Part.fixed
    private var flags: UInt8 = 0
    /// The bytes of a fixed-size part read so far (the first 10, the extra length, the CRC).
    private var held: [UInt8] = []
    /// CRC-32 of the header bytes before the header CRC.
    private var crc: UInt32 = 0

    var isComplete: Bool {
        if case .done = part { return true }
        return false
    }

    /// Reads header bytes from the start of `input`; returns how many were header.
    mutating func read(_ input: UnsafeBufferPointer<UInt8>) throws -> Int {
        var used = 0
        while used < input.count, !isComplete {
            let rest = UnsafeBufferPointer(rebasing: input[used...])
            // Every byte before the header CRC counts towards it (RFC 1952 2.3.1).
            var countsTowardsCRC = true
            let taken: Int
            switch part {
            case .fixed:
                taken = hold(rest, upTo: Self.fixedLength)
                if held.count == Self.fixedLength { try readFixed() }
            case .extraLength:
                taken = hold(rest, upTo: 2)
                if held.count == 2 {
                    part = .extra(remaining: Int(held[0]) | Int(held[1]) << 8)
                    held = []
                }
            case .extra(let remaining):
                taken = min(remaining, rest.count)
                part = remaining == taken ? afterExtra : .extra(remaining: remaining - taken)
            case .name, .comment:
                // Up to and including the terminating zero byte.
                if let zero = rest.firstIndex(of: 0) {
                    taken = zero + 1
                    if case .name = part { part = afterName } else { part = afterComment }
                } else {
                    taken = rest.count
                }
            case .headerCRC:
                countsTowardsCRC = false
                taken = hold(rest, upTo: 2)
                if held.count == 2 {
                    guard UInt16(held[0]) | UInt16(held[1]) << 8 == UInt16(truncatingIfNeeded: crc) else {
                        throw CompressionError.corrupt("header crc mismatch")
                    }
                    part = .done
                }
            case .done:
                taken = 0
            }
            if countsTowardsCRC && taken > 0 { crc = crc32_gzip_refl(crc, rest.baseAddress, UInt64(taken)) }
            used += taken
        }
        return used
    }

    /// Moves up to `count` bytes into `held`; returns how many it took.
    private mutating func hold(_ input: UnsafeBufferPointer<UInt8>, upTo count: Int) -> Int {
        let taken = min(count - held.count, input.count)
        held.append(contentsOf: input.prefix(taken))
        return taken
    }

    private mutating func readFixed() throws {
        guard held[0] == 0x1F, held[1] == 0x8B else { throw CompressionError.corrupt("incorrect header check") }
        guard held[2] == 8 else { throw CompressionError.corrupt("unknown compression method") }
        flags = held[3]
        guard flags & 0xE0 == 0 else { throw CompressionError.corrupt("unknown header flags set") }
        held = []
        part = flags & Self.extraFlag != 0 ? .extraLength : afterExtra
    }

    private var afterExtra: Part { flags & Self.nameFlag != 0 ? .name : afterName }
    private var afterName: Part { flags & Self.commentFlag != 0 ? .comment : afterComment }
    private var afterComment: Part { flags & Self.headerCRCFlag != 0 ? .headerCRC : .done }
}
