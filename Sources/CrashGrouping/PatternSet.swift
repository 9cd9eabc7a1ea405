/// A compiled list of `FrameTable` patterns, matched against UTF-8 bytes without building
/// strings: exact names through a hash table, the others (`abc*`, `*abc`, `*abc*`, `a*b`)
/// by a scan of their short lists.
struct PatternSet: Sendable {
    private var exact: [UInt64: [[UInt8]]] = [:]
    /// Prefix patterns by their first byte.
    private var prefixes: [[[UInt8]]] = Array(repeating: [], count: 256)
    private var suffixes: [[UInt8]] = []
    /// Infix patterns by their first byte.
    private var infixes: [[[UInt8]]] = Array(repeating: [], count: 256)
    private var hasInfixes = false
    private var prefixSuffixes: [([UInt8], [UInt8])] = []

    init(_ patterns: [String]) {
        for pattern in patterns {
            let bytes = Array(pattern.utf8)
            let stars = bytes.indices.filter { bytes[$0] == UInt8(ascii: "*") }
            switch stars.count {
            case 0:
                exact[Self.hash(bytes[...]), default: []].append(bytes)
            case 1 where stars[0] == bytes.count - 1:
                let prefix = Array(bytes.dropLast())
                prefixes[Int(prefix.first ?? 0)].append(prefix)
            case 1 where stars[0] == 0:
                suffixes.append(Array(bytes.dropFirst()))
            case 1:
                prefixSuffixes.append((Array(bytes[..<stars[0]]), Array(bytes[(stars[0] + 1)...])))
            case 2 where stars[0] == 0 && stars[1] == bytes.count - 1:
                let infix = Array(bytes.dropFirst().dropLast())
                infixes[Int(infix.first ?? 0)].append(infix)
                hasInfixes = true
            default:
                preconditionFailure("unsupported FrameTable pattern '\(pattern)'")
            }
        }
    }

    /// FNV-1a: cheap, and good enough for a few hundred fixed names.
    @inline(__always) static func hash<C: Collection>(_ bytes: C) -> UInt64 where C.Element == UInt8 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    func matches(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Bool {
        guard !text.isEmpty else { return false }
        if let candidates = exact[Self.hash(text)], candidates.contains(where: { $0.elementsEqual(text) }) { return true }
        for p in prefixes[Int(text[text.startIndex])] where text.count >= p.count {
            var m = 1
            while m < p.count && text[text.startIndex + m] == p[m] { m += 1 }
            if m == p.count { return true }
        }
        for s in suffixes where Self.hasSuffix(text, s) { return true }
        for (p, s) in prefixSuffixes where text.count >= p.count + s.count && text.starts(with: p) && Self.hasSuffix(text, s) {
            return true
        }
        if hasInfixes {
            // One scan: at each byte, only the infixes that start with it.
            var i = text.startIndex
            while i < text.endIndex {
                for infix in infixes[Int(text[i])] where text.endIndex - i >= infix.count {
                    var m = 1
                    while m < infix.count && text[i + m] == infix[m] { m += 1 }
                    if m == infix.count { return true }
                }
                i += 1
            }
        }
        return false
    }

    @inline(__always) static func hasSuffix(_ text: Slice<UnsafeBufferPointer<UInt8>>, _ s: [UInt8]) -> Bool {
        guard text.count >= s.count else { return false }
        return text[(text.endIndex - s.count)...].elementsEqual(s)
    }
}
