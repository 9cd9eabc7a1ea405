import CrashWire

/// The first, streaming pass over an ingest body: a resumable RFC 8259 syntax check fed
/// chunk by chunk as the body is received and inflated, that stops at the first byte that
/// proves the body bad, before the rest is read or inflated.
///
/// It checks UTF-8, the JSON grammar (escapes, numbers, literals), unescaped control
/// characters in strings, nesting (at most ``maxDepth`` open arrays and objects), that the
/// top level is an object with at most one `reports` key whose value is an array, and
/// that the array has at most `WireProtocol.maxReportsPerBatch` elements: the 1001st
/// element is refused where it starts. It keeps no values: its memory is constant.
///
/// It hands on the body without the white space between tokens (``scan(_:keeping:)``):
/// JSON needs none of it once the grammar is checked, so a body padded with white space
/// (the zip bomb: `{"reports":[` and 16 MiB of spaces) costs the time to skip it, eight
/// bytes at a time, not the memory to keep it. ``ReportReader`` then reads the values of a
/// body this scanner passed.
struct JSONBodyScanner {
    /// Deepest nesting of arrays and objects, the top-level object included.
    static let maxDepth = 32

    private enum State: UInt8 {
        // Between tokens (white space allowed): the first seven, see `isBetweenTokens`.
        case value, valueOrClose, keyOrClose, key, colon, afterValue, end
        case string, escape, hex1, hex2, hex3, hex4
        case minus, zero, integer, dot, fraction, exponent, exponentSign, exponentDigits
        case literal
    }

    private var state = State.value
    /// Open containers, innermost last: true for an object.
    private var stack: [Bool] = []
    private var stringIsKey = false
    /// The string being read is a key of the top-level object.
    private var collectingKey = false
    private var literal: StaticString = "null"
    private var literalIndex = 0
    /// Bytes scanned so far (the offset of the next byte).
    private(set) var offset = 0
    // UTF-8: continuation bytes still due and the range of the next one.
    private var utf8Due = 0
    private var utf8Low: UInt8 = 0x80
    private var utf8High: UInt8 = 0xBF
    // The top-level object's keys, collected (raw, capped) to find `reports`.
    private var key: [UInt8] = []
    private var keyIsReports = false
    private var sawReports = false
    private var inReports = false
    /// Elements of `reports` seen so far.
    private(set) var reportCount = 0

    init() {
        stack.reserveCapacity(Self.maxDepth)
        key.reserveCapacity(Self.keyCap)
    }

    /// The longest raw key kept: `reports` spelled with `\uXXXX` escapes throughout.
    private static let keyCap = 6 * 7

    static let notJSON = IngestError.badRequest("body is not JSON")
    static let invalidUTF8 = IngestError.badRequest("body is not JSON: invalid UTF-8")
    static let notAnObject = IngestError.badRequest("body is not JSON: expected an object with a \"reports\" array")
    static let notAnArray = IngestError.badRequest("\"reports\" is not an array")
    static let tooDeep = IngestError.badRequest("body is nested deeper than \(maxDepth) arrays and objects")
    static let tooMany = IngestError.badRequest(
        "\"reports\" has more than \(WireProtocol.maxReportsPerBatch) reports; send 1 to \(WireProtocol.maxReportsPerBatch)")
    static let twice = IngestError.badRequest("body has \"reports\" more than once")

    /// Refusals that stop the body where they are proven: the limits of the contract that a
    /// hostile body abuses (the 1001st report, nesting past 32). Other proofs of a bad body
    /// are answered once the body has been received, so that a size limit it also breaks
    /// decides first (413 over 400, as before), still without keeping any more of it.
    static func isImmediate(_ error: IngestError) -> Bool { error == tooMany || error == tooDeep }

    /// Scans the next bytes of the body and appends them to `kept`, without the white space
    /// between tokens. After a throw, `kept` holds an unspecified prefix.
    mutating func scan(_ bytes: UnsafeBufferPointer<UInt8>, keeping kept: inout GrowingBytes) throws(IngestError) {
        var i = 0
        let count = bytes.count
        // Bytes before this are in `kept`, or white space dropped.
        var keptUpTo = 0
        while i < count {
            let b = bytes[i]
            if utf8Due > 0 {
                guard b >= utf8Low, b <= utf8High else { throw Self.invalidUTF8 }
                utf8Due -= 1
                utf8Low = 0x80
                utf8High = 0xBF
                if collectingKey { collectKeyByte(b) }
                i += 1
                continue
            }
            if b >= 0x80 {
                switch b {
                case 0xC2...0xDF: utf8Due = 1
                case 0xE0:
                    utf8Due = 2
                    utf8Low = 0xA0
                case 0xE1...0xEC, 0xEE...0xEF: utf8Due = 2
                case 0xED:
                    utf8Due = 2
                    utf8High = 0x9F
                case 0xF0:
                    utf8Due = 3
                    utf8Low = 0x90
                case 0xF1...0xF3: utf8Due = 3
                case 0xF4:
                    utf8Due = 3
                    utf8High = 0x8F
                default: throw Self.invalidUTF8
                }
                // Outside a string, any non-ASCII byte is a grammar error.
                guard state == .string else { throw Self.notJSON }
                if collectingKey { collectKeyByte(b) }
                i += 1
                continue
            }
            if state.rawValue <= State.end.rawValue, Self.isSpace(b) {
                if keptUpTo < i { kept.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[keptUpTo..<i])) }
                i = Self.endOfSpace(bytes, from: i + 1)
                keptUpTo = i
                continue
            }
            switch state {
            case .string:
                // The hot loop: plain ASCII string content.
                let j = JSONText.endOfPlainText(bytes, from: i, stoppingAtNonASCII: true)
                if collectingKey { for k in i..<j { collectKeyByte(bytes[k]) } }
                i = j
                guard i < count else { continue }
                let c = bytes[i]
                if c == 0x22 {
                    try endString()
                    i += 1
                } else if c == 0x5C {
                    if collectingKey { collectKeyByte(c) }
                    state = .escape
                    i += 1
                } else if c < 0x20 {
                    throw Self.controlCharacter(c, at: offset + i)
                }
                // c >= 0x80: the UTF-8 step above takes it on the next turn.
                continue
            case .escape:
                switch b {
                case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: state = .string
                case 0x75: state = .hex1
                default: throw Self.notJSON
                }
                if collectingKey { collectKeyByte(b) }
            case .hex1, .hex2, .hex3, .hex4:
                guard Self.isHex(b) else { throw Self.notJSON }
                if collectingKey { collectKeyByte(b) }
                switch state {
                case .hex1: state = .hex2
                case .hex2: state = .hex3
                case .hex3: state = .hex4
                default: state = .string
                }
            case .value, .valueOrClose:
                if b == 0x5D, state == .valueOrClose {
                    try close(array: true)
                    break
                }
                try beginValue(b)
            case .keyOrClose, .key:
                if b == 0x7D, state == .keyOrClose {
                    try close(array: false)
                    break
                }
                guard b == 0x22 else { throw Self.notJSON }
                state = .string
                stringIsKey = true
                collectingKey = stack.count == 1
                key.removeAll(keepingCapacity: true)
            case .colon:
                guard b == 0x3A else { throw Self.notJSON }
                state = .value
            case .afterValue:
                let inObject = stack.last!
                if b == 0x2C {
                    state = inObject ? .key : .value
                } else if b == 0x7D, inObject {
                    try close(array: false)
                } else if b == 0x5D, !inObject {
                    try close(array: true)
                } else {
                    throw Self.notJSON
                }
            case .end:
                throw Self.notJSON
            case .minus:
                if b == 0x30 {
                    state = .zero
                } else if Self.isDigit(b) {
                    state = .integer
                } else {
                    throw Self.notJSON
                }
            case .zero, .integer, .fraction, .exponentDigits:
                if Self.isDigit(b) {
                    guard state != .zero else { throw Self.notJSON }
                } else if b == 0x2E, state == .zero || state == .integer {
                    state = .dot
                } else if b == 0x65 || b == 0x45, state != .exponentDigits {
                    state = .exponent
                } else {
                    // The number ended: this byte belongs to what follows it.
                    state = .afterValue
                    continue
                }
            case .dot:
                guard Self.isDigit(b) else { throw Self.notJSON }
                state = .fraction
            case .exponent:
                if b == 0x2B || b == 0x2D {
                    state = .exponentSign
                } else if Self.isDigit(b) {
                    state = .exponentDigits
                } else {
                    throw Self.notJSON
                }
            case .exponentSign:
                guard Self.isDigit(b) else { throw Self.notJSON }
                state = .exponentDigits
            case .literal:
                let expected = literal.withUTF8Buffer { $0[literalIndex] }
                guard b == expected else { throw Self.notJSON }
                literalIndex += 1
                if literalIndex == literal.utf8CodeUnitCount { state = .afterValue }
            }
            i += 1
        }
        if keptUpTo < count { kept.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[keptUpTo..<count])) }
        offset += count
    }

    /// Ends the body: it must have been one complete JSON value.
    func finish() throws(IngestError) {
        if utf8Due > 0 { throw Self.invalidUTF8 }
        guard state == .end else { throw Self.notJSON }
    }

    private mutating func beginValue(_ b: UInt8) throws(IngestError) {
        switch stack.count {
        case 0:
            guard b == 0x7B else { throw Self.notAnObject }
        case 1:
            if keyIsReports, b != 0x5B { throw Self.notAnArray }
        case 2 where inReports:
            reportCount += 1
            if reportCount > WireProtocol.maxReportsPerBatch { throw Self.tooMany }
        default:
            break
        }
        switch b {
        case 0x7B:
            try push(object: true)
            state = .keyOrClose
        case 0x5B:
            try push(object: false)
            if stack.count == 2, keyIsReports { inReports = true }
            state = .valueOrClose
        case 0x22:
            state = .string
            stringIsKey = false
        case 0x2D: state = .minus
        case 0x30: state = .zero
        case 0x31...0x39: state = .integer
        case 0x74: beginLiteral("true")
        case 0x66: beginLiteral("false")
        case 0x6E: beginLiteral("null")
        default: throw Self.notJSON
        }
    }

    private mutating func beginLiteral(_ text: StaticString) {
        literal = text
        literalIndex = 1
        state = .literal
    }

    private mutating func push(object: Bool) throws(IngestError) {
        guard stack.count < Self.maxDepth else { throw Self.tooDeep }
        stack.append(object)
    }

    private mutating func close(array: Bool) throws(IngestError) {
        if array, stack.count == 2, inReports { inReports = false }
        stack.removeLast()
        state = stack.isEmpty ? .end : .afterValue
    }

    private mutating func endString() throws(IngestError) {
        guard stringIsKey else {
            state = stack.isEmpty ? .end : .afterValue
            return
        }
        stringIsKey = false
        state = .colon
        guard collectingKey else { return }
        collectingKey = false
        keyIsReports = key.count <= Self.keyCap && JSONText.unescapedEquals(key, "reports")
        if keyIsReports {
            if sawReports { throw Self.twice }
            sawReports = true
        }
    }

    private mutating func collectKeyByte(_ b: UInt8) {
        if key.count <= Self.keyCap { key.append(b) }
    }

    private static func controlCharacter(_ byte: UInt8, at offset: Int) -> IngestError {
        let code = String(byte, radix: 16, uppercase: true)
        let padded = String(repeating: "0", count: 4 - code.count) + code
        return .badRequest("body is not JSON: unescaped control character U+\(padded) in a string at byte \(offset)")
    }

    @inline(__always) static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 }

    /// The end of the white space from `start` on: runs of spaces eight bytes at a time.
    @inline(__always) private static func endOfSpace(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        let count = bytes.count
        let base = UnsafeRawPointer(bytes.baseAddress!)
        var j = start
        while true {
            while j + 8 <= count, base.loadUnaligned(fromByteOffset: j, as: UInt64.self) == 0x2020_2020_2020_2020 { j += 8 }
            guard j < count, isSpace(bytes[j]) else { return j }
            j += 1
        }
    }
    @inline(__always) static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
    @inline(__always) static func isHex(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66)
    }
}
