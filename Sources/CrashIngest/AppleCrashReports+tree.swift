import Foundation

// A JSON text read without recursion into a flat tree, for MetricKit payloads: each frame of a
// call stack nests in its caller's `subFrames`, two levels per frame, past the nesting limits
// of Foundation's reader and writer (a 1,000-frame stack is 2,000 levels deep).

/// A JSON text as a flat list of nodes: containers name their children by index, so reading,
/// walking, writing and freeing it never recurse, however deep it nests.
struct JSONTree {
    enum Node {
        case object([(key: String, value: Int)])
        case array([Int])
        case string(String)
        /// The number's text as written (valid JSON number syntax).
        case number(String)
        case bool(Bool)
        case null
    }

    private(set) var nodes: [Node] = []
    /// The root node (0 once parsed).
    var root: Int { 0 }

    /// Most nodes one text may hold: more is refused (a body within the door's size limit holds
    /// far fewer unless it is made of empty containers and literals).
    static let maxNodes = 1_000_000

    /// Reads `bytes` as one JSON text; nil when they are not one (or hold more than
    /// ``maxNodes`` values).
    init?(_ bytes: ArraySlice<UInt8>) {
        var parser = Parser(bytes: Array(bytes))
        guard let nodes = parser.parse() else { return nil }
        self.nodes = nodes
    }

    subscript(_ index: Int) -> Node { nodes[index] }

    /// The value of `key` in the object at `index`, if it is one and has the key.
    func member(_ index: Int, _ key: String) -> Int? {
        guard case .object(let members) = nodes[index] else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The elements of the array at `index` (nil when it is not an array).
    func elements(_ index: Int) -> [Int]? {
        guard case .array(let items) = nodes[index] else { return nil }
        return items
    }

    /// The node at `index` as Foundation values (`[String: Any]`, `[Any]`, `String`, `Int`,
    /// `UInt64` or `Double`, `Bool`, `NSNull`), leaving out the members named in `omitting`
    /// (at any depth) and every container deeper than `maxDepth` levels: nil for those.
    func foundationValue(_ index: Int, omitting: Set<String> = [], maxDepth: Int = 32) -> Any? {
        guard maxDepth > 0 else { return nil }
        switch nodes[index] {
        case .object(let members):
            var object: [String: Any] = [:]
            for member in members where !omitting.contains(member.key) {
                if let value = foundationValue(member.value, omitting: omitting, maxDepth: maxDepth - 1) { object[member.key] = value }
            }
            return object
        case .array(let items):
            return items.compactMap { foundationValue($0, omitting: omitting, maxDepth: maxDepth - 1) }
        case .string(let text): return text
        case .number(let text):
            if let n = Int(text) { return n }
            if let n = UInt64(text) { return n }
            return Double(text) ?? 0
        case .bool(let value): return value
        case .null: return NSNull()
        }
    }

    /// The canonical JSON text of the node at `index`: members in byte order of their keys,
    /// no white space, strings escaped only where JSON requires (`"`, `\`, control
    /// characters), numbers as written. Two texts that differ only in spacing, member order or
    /// optional escapes give the same bytes. Written without recursion.
    func canonical(_ index: Int) -> [UInt8] {
        var out: [UInt8] = []
        enum Step {
            case node(Int)
            case bytes([UInt8])
        }
        var work: [Step] = [.node(index)]
        while let step = work.popLast() {
            switch step {
            case .bytes(let bytes): out += bytes
            case .node(let n):
                switch nodes[n] {
                case .object(let members):
                    let sorted = members.enumerated().sorted {
                        $0.element.key.utf8.lexicographicallyPrecedes($1.element.key.utf8)
                            || ($0.element.key == $1.element.key && $0.offset < $1.offset)
                    }
                    var steps: [Step] = [.bytes([UInt8(ascii: "{")])]
                    for (i, member) in sorted.enumerated() {
                        var key: [UInt8] = i == 0 ? [] : [UInt8(ascii: ",")]
                        Self.writeString(member.element.key, to: &key)
                        key.append(UInt8(ascii: ":"))
                        steps.append(.bytes(key))
                        steps.append(.node(member.element.value))
                    }
                    steps.append(.bytes([UInt8(ascii: "}")]))
                    work += steps.reversed()
                case .array(let items):
                    var steps: [Step] = [.bytes([UInt8(ascii: "[")])]
                    for (i, item) in items.enumerated() {
                        if i > 0 { steps.append(.bytes([UInt8(ascii: ",")])) }
                        steps.append(.node(item))
                    }
                    steps.append(.bytes([UInt8(ascii: "]")]))
                    work += steps.reversed()
                case .string(let text): Self.writeString(text, to: &out)
                case .number(let text): out += Array(text.utf8)
                case .bool(let value): out += Array((value ? "true" : "false").utf8)
                case .null: out += Array("null".utf8)
                }
            }
        }
        return out
    }

    private static func writeString(_ text: String, to out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), b]
            case 0..<0x20: out += Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 0xf)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The reader: one pass over the bytes with an explicit stack of open containers.
    private struct Parser {
        let bytes: [UInt8]
        var at = 0
        var nodes: [Node] = []

        /// An open container: its node, and for an object the key waiting for its value.
        struct Open {
            var node: Int
            var isObject: Bool
            var members: [(key: String, value: Int)] = []
            var items: [Int] = []
            var pendingKey: String?
        }

        mutating func parse() -> [Node]? {
            var stack: [Open] = []
            var done = false
            while true {
                skipSpace()
                // A value is expected: at the top, after `[`, `,` in an array, or `:`.
                guard let b = peek() else { return nil }
                let index = nodes.count
                guard index < JSONTree.maxNodes else { return nil }
                switch b {
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    at += 1
                    let isObject = b == UInt8(ascii: "{")
                    nodes.append(isObject ? .object([]) : .array([]))
                    attach(index, to: &stack)
                    stack.append(Open(node: index, isObject: isObject))
                    skipSpace()
                    if peek() == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                        at += 1
                        close(&stack)
                        guard finishValue(&stack, done: &done) else { return nil }
                        if done { return finish() }
                        continue
                    }
                    if isObject {
                        guard let key = readString() else { return nil }
                        skipSpace()
                        guard peek() == UInt8(ascii: ":") else { return nil }
                        at += 1
                        stack[stack.count - 1].pendingKey = key
                    }
                    continue
                case UInt8(ascii: "\""):
                    guard let text = readString() else { return nil }
                    nodes.append(.string(text))
                case UInt8(ascii: "t"):
                    guard literal("true") else { return nil }
                    nodes.append(.bool(true))
                case UInt8(ascii: "f"):
                    guard literal("false") else { return nil }
                    nodes.append(.bool(false))
                case UInt8(ascii: "n"):
                    guard literal("null") else { return nil }
                    nodes.append(.null)
                default:
                    guard let number = readNumber() else { return nil }
                    nodes.append(.number(number))
                }
                attach(index, to: &stack)
                guard finishValue(&stack, done: &done) else { return nil }
                if done { return finish() }
            }
        }

        /// Adds the value at `index` to the innermost open container.
        private func attach(_ index: Int, to stack: inout [Open]) {
            guard !stack.isEmpty else { return }
            let last = stack.count - 1
            if stack[last].isObject {
                stack[last].members.append((stack[last].pendingKey ?? "", index))
                stack[last].pendingKey = nil
            } else {
                stack[last].items.append(index)
            }
        }

        /// Stores the innermost open container's children in its node and closes it.
        private mutating func close(_ stack: inout [Open]) {
            let open = stack.removeLast()
            nodes[open.node] = open.isObject ? .object(open.members) : .array(open.items)
        }

        /// After a value: `,` (then a key in an object) or the end of containers; `done` when
        /// the top-level value is complete.
        private mutating func finishValue(_ stack: inout [Open], done: inout Bool) -> Bool {
            while true {
                guard let open = stack.last else {
                    done = true
                    return true
                }
                skipSpace()
                guard let b = peek() else { return false }
                if b == UInt8(ascii: ",") {
                    at += 1
                    if open.isObject {
                        skipSpace()
                        guard let key = readString() else { return false }
                        skipSpace()
                        guard peek() == UInt8(ascii: ":") else { return false }
                        at += 1
                        stack[stack.count - 1].pendingKey = key
                    }
                    return true
                }
                guard b == (open.isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else { return false }
                at += 1
                close(&stack)
            }
        }

        private mutating func finish() -> [Node]? {
            skipSpace()
            return at == bytes.count ? nodes : nil
        }

        private func peek() -> UInt8? { at < bytes.count ? bytes[at] : nil }

        private mutating func skipSpace() {
            while at < bytes.count, AppleCrashReports.isSpace(bytes[at]) { at += 1 }
        }

        private mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard at + count <= bytes.count else { return false }
            let matches = text.withUTF8Buffer { text in (0..<count).allSatisfy { bytes[at + $0] == text[$0] } }
            if matches { at += count }
            return matches
        }

        private mutating func readNumber() -> String? {
            let start = at
            func digits() -> Bool {
                let first = at
                while at < bytes.count, bytes[at] >= 0x30, bytes[at] <= 0x39 { at += 1 }
                return at > first
            }
            if peek() == UInt8(ascii: "-") { at += 1 }
            if peek() == UInt8(ascii: "0") {
                at += 1
            } else {
                guard digits() else { return nil }
            }
            if peek() == UInt8(ascii: ".") {
                at += 1
                guard digits() else { return nil }
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                at += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { at += 1 }
                guard digits() else { return nil }
            }
            return String(decoding: bytes[start..<at], as: UTF8.self)
        }

        /// A string at `at` (its opening quote), unescaped; nil when malformed.
        private mutating func readString() -> String? {
            guard peek() == UInt8(ascii: "\"") else { return nil }
            at += 1
            var out: [UInt8] = []
            var pendingHigh: UInt32?
            while at < bytes.count {
                let b = bytes[at]
                at += 1
                if b == UInt8(ascii: "\"") {
                    if pendingHigh != nil { out += [0xEF, 0xBF, 0xBD] }
                    return String(decoding: out, as: UTF8.self)
                }
                guard b >= 0x20 else { return nil }
                guard b == UInt8(ascii: "\\") else {
                    if pendingHigh != nil {
                        out += [0xEF, 0xBF, 0xBD]
                        pendingHigh = nil
                    }
                    out.append(b)
                    continue
                }
                guard at < bytes.count else { return nil }
                let e = bytes[at]
                at += 1
                var scalar: UInt32
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalar = UInt32(e)
                case UInt8(ascii: "b"): scalar = 8
                case UInt8(ascii: "f"): scalar = 12
                case UInt8(ascii: "n"): scalar = 10
                case UInt8(ascii: "r"): scalar = 13
                case UInt8(ascii: "t"): scalar = 9
                case UInt8(ascii: "u"):
                    guard at + 4 <= bytes.count, let value = UInt32(String(decoding: bytes[at..<at + 4], as: UTF8.self), radix: 16)
                    else { return nil }
                    at += 4
                    scalar = value
                default: return nil
                }
                if let high = pendingHigh {
                    pendingHigh = nil
                    if scalar >= 0xDC00, scalar <= 0xDFFF {
                        scalar = 0x10000 + ((high - 0xD800) << 10) + (scalar - 0xDC00)
                    } else {
                        out += [0xEF, 0xBF, 0xBD]
                    }
                }
                if scalar >= 0xD800, scalar <= 0xDBFF {
                    pendingHigh = scalar
                    continue
                }
                let character = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                out += Array(String(Character(character)).utf8)
            }
            return nil
        }
    }
}
