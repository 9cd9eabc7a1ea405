import CRE2

/// A project's `patterns` (data-protection.md, "Optional text rules"), compiled once with RE2:
/// each match becomes `[Filtered]`.
///
/// RE2 runs in time linear in the text it reads, but finding every match means searching again
/// after each one, and a pattern that looks far ahead (`a.*b|a`) reads to the end of the text
/// each time. So each pattern has a budget per string: the bytes its searches may start to read,
/// ``budgetPerByte`` times the string's length plus ``budgetBase``. A string on which a pattern
/// runs out of its budget is replaced whole by `[Filtered]` (fail closed), and a report's
/// scrubbing costs at most a fixed multiple of its size, whatever the patterns and the text.
public final class ScrubPatterns: @unchecked Sendable {
    /// The patterns as the project set them, in list order.
    public let sources: [String]
    /// RE2 objects; only read (RE2's matching is thread-safe), freed with this object.
    private let compiled: [UnsafeMutableRawPointer]

    /// Bytes one pattern's searches may read per byte of a string, beyond ``budgetBase``.
    public static let budgetPerByte = 16
    public static let budgetBase = 256

    /// Why a pattern does not compile.
    public struct Invalid: Error, CustomStringConvertible {
        /// The pattern's index in the list.
        public var index: Int
        /// RE2's reason.
        public var description: String
    }

    /// Compiles `patterns`; throws for the first that RE2 refuses.
    public init(_ patterns: [String]) throws(Invalid) {
        var compiled: [UnsafeMutableRawPointer] = []
        for (index, pattern) in patterns.enumerated() {
            switch Self.compile(pattern) {
            case .success(let re): compiled.append(re)
            case .failure(let error):
                compiled.forEach { crashguard_re2_delete($0) }
                throw Invalid(index: index, description: error.description)
            }
        }
        sources = patterns
        self.compiled = compiled
    }

    deinit { compiled.forEach { crashguard_re2_delete($0) } }

    /// Why `pattern` is not a valid RE2 pattern, or nil when it is.
    public static func problem(with pattern: String) -> String? {
        switch compile(pattern) {
        case .success(let re):
            crashguard_re2_delete(re)
            return nil
        case .failure(let error): return error.description
        }
    }

    private struct CompileError: Error, CustomStringConvertible { var description: String }

    private static func compile(_ pattern: String) -> Result<UnsafeMutableRawPointer, CompileError> {
        var error = [CChar](repeating: 0, count: 256)
        let bytes = Array(pattern.utf8)
        let re = bytes.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { crashguard_re2_new($0.baseAddress, $0.count, &error, error.count) }
        }
        guard let re else {
            let message = error.withUnsafeBufferPointer { p in
                String(decoding: p.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
            return .failure(CompileError(description: message))
        }
        return .success(re)
    }

    public var isEmpty: Bool { compiled.isEmpty }

    /// The replacements of pattern `index` in `b`: each match, less the marker bytes in it
    /// (`p`), becomes `[Filtered]`; one replacement of the whole text when the budget runs out.
    /// Empty matches are skipped.
    func replacements(_ index: Int, _ b: [UInt8], _ p: [Bool]) -> [Replacement] {
        guard !b.isEmpty else { return [] }
        let re = compiled[index]
        let filtered = Array(ReportScrubber.filtered.utf8)
        var budget = Self.budgetPerByte * b.count + Self.budgetBase
        var out: [Replacement] = []
        var start = 0
        b.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { text in
                while start <= text.count {
                    budget -= text.count - start + 1
                    if budget < 0 {
                        out = [Replacement(range: 0..<b.count, text: filtered)]
                        return
                    }
                    var lower = 0
                    var upper = 0
                    guard crashguard_re2_find(re, text.baseAddress, text.count, start, &lower, &upper) == 1 else { return }
                    if upper == lower {
                        start = upper + 1
                        continue
                    }
                    // Each run of the match outside a marker becomes one marker.
                    var i = lower
                    while i < upper {
                        while i < upper && p[i] { i += 1 }
                        let runStart = i
                        while i < upper && !p[i] { i += 1 }
                        if i > runStart { out.append(Replacement(range: runStart..<i, text: filtered)) }
                    }
                    start = upper
                }
            }
        }
        return out
    }
}
