#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who a stack frame belongs to, as grouping v2 reads it.
public enum FrameRole: Sendable, Hashable {
    /// The app's own code: these frames name the bug.
    case app
    /// The system: Apple's frameworks, libc, the Swift runtime, a language's standard
    /// library. Used only when a stack has no app frame.
    case system
    /// The crash and exception machinery (throw, abort, assertion handlers, the SDK's
    /// guards): never part of a signature.
    case machinery
}

/// Reads a frame's image and symbol from the shapes the server receives, and looks them
/// up in `FrameTable`. No normalization and no allocation: this runs on every frame up to
/// the third app frame of every report.
///
/// Frame shapes: Apple crash logs and the SDK (`3  Demo  0x100a1b2c3 -[A b] + 44`, image
/// then address then symbol), the Swift backtracer (`0 0x... level3() + 16 in bt at
/// /src/bt.swift:6:5`), LLDB (`frame #1: 0x... Demo`Demo.foo() at File.swift:12`), glibc
/// (`/lib/x86_64-linux-gnu/libc.so.6(abort+0x12)[0x7f...]`) and Sentry-mapped frames
/// (`<function> (<module or file>)`). Anything else is a symbol without an image.
///
/// A frame may end with a mark, ` [app]` or ` [system]` (Sentry's `in_app`, the SDK's own
/// knowledge of the main executable): a mark wins over the image lists; only the machinery
/// symbols are skipped whatever the mark.
public enum FrameClassifier {
    /// `FrameTable`'s lists, compiled once. One reference for all of them: a global is
    /// checked for its lazy initialization at every read, so a stack reads it once
    /// (``Grouping/selectFrames(_:)``), not once per list and frame.
    final class Tables: Sendable {
        let machinerySymbols = PatternSet(FrameTable.machinerySymbols)
        let machineryImages = PatternSet(FrameTable.machineryImages)
        let systemImages = PatternSet(FrameTable.systemImages)
        let systemPaths = PatternSet(FrameTable.systemPaths)
        /// The exact names (no `*`) of `machineryImages` and `systemImages`, with the role
        /// ``imageRole(_:_:_:)`` gives each (a system name that a machinery pattern matches
        /// is machinery), computed from the lists: one lookup for the names most frames carry
        /// (`UIKitCore`, `Foundation`).
        let exactImageNames: PatternSet
        let exactImageRoles: [FrameRole]
        /// Every system path pattern holds a `/`: an image without one is no system path.
        let systemPathsNeedSlash = FrameTable.systemPaths.allSatisfy { $0.contains("/") }

        init() {
            var names: [String] = []
            var roles: [FrameRole] = []
            let machineryImages = PatternSet(FrameTable.machineryImages)
            for name in FrameTable.machineryImages + FrameTable.systemImages where !name.contains("*") && !names.contains(name) {
                names.append(name)
                let machinery = Array(name.utf8).withUnsafeBufferPointer { machineryImages.matches($0[...]) }
                roles.append(machinery ? .machinery : .system)
            }
            exactImageNames = PatternSet(names)
            exactImageRoles = roles
        }
    }

    static let tables = Tables()

    /// The marks a frame may end with.
    public static let appMark: StaticString = " [app]"
    public static let systemMark: StaticString = " [system]"

    /// A frame's role, and the length in bytes of its text without the mark.
    public static func classify(_ frame: String) -> (role: FrameRole, length: Int) {
        let memo = ImageMemo.none
        return Bytes.withUTF8(frame) { classify(bytes: $0, tables: tables, memo: memo) }
    }

    /// The length in bytes of a frame's text without its mark (cheap: no parsing).
    public static func unmarkedLength(_ frame: String) -> Int {
        Bytes.withUTF8(frame) { unmarkedLength(bytes: $0) }
    }

    static func unmarkedLength(bytes src: UnsafeBufferPointer<UInt8>) -> Int {
        var end = src.count
        while end > 0 && Bytes.isSpace(src[end - 1]) { end -= 1 }
        return markStart(src, end, appMark) ?? markStart(src, end, systemMark) ?? src.count
    }

    /// `machineryInSystem: false` skips the machinery lookup of a frame whose image is the
    /// system's (it is skipped either way, unless the stack has no app frame).
    static func classify(
        bytes src: UnsafeBufferPointer<UInt8>, machineryInSystem: Bool = true, tables: Tables, memo: ImageMemo
    ) -> (
        role: FrameRole, length: Int
    ) {
        var end = src.count
        while end > 0 && Bytes.isSpace(src[end - 1]) { end -= 1 }
        var mark: FrameRole?
        // Both marks end with `]` (most frames do not).
        if end == 0 || src[end - 1] != UInt8(ascii: "]") {
        } else if let cut = markStart(src, end, FrameClassifier.appMark) {
            mark = .app
            end = cut
        } else if let cut = markStart(src, end, FrameClassifier.systemMark) {
            mark = .system
            end = cut
        }
        guard end > 0 else { return (mark ?? .app, end) }
        let parts = FrameParts(src, end: end)
        // The machinery is skipped even in a frame marked as the app's: Sentry marks frames by
        // image, and the SDK's guards are linked into the app's own image.
        func isMachinery() -> Bool {
            guard let symbol = parts.symbol(in: src) else { return false }
            return tables.machinerySymbols.matches(src[symbol])
        }
        if let mark {
            if (mark == .app || machineryInSystem) && isMachinery() { return (.machinery, end) }
            return (mark, end)
        }
        var role = FrameRole.app
        if let image = parts.image {
            let name = UnsafeBufferPointer(rebasing: src[image])
            if let known = memo.role(of: name) {
                role = known
            } else {
                role = imageRole(src, image, tables)
                memo.remember(name, role)
            }
        }
        if role == .machinery || ((role == .app || machineryInSystem) && isMachinery()) { return (.machinery, src.count) }
        return (role, src.count)
    }

    /// The role the image lists give a frame's image.
    static func imageRole(_ src: UnsafeBufferPointer<UInt8>, _ image: Range<Int>, _ tables: Tables) -> FrameRole {
        let name = src[image]
        let slash = Bytes.afterLast(UInt8(ascii: "/"), src.baseAddress!, image.lowerBound, image.upperBound)
        let base = src[slash..<image.upperBound]
        // Not one of the exact names of either list: only their other patterns can match.
        if let known = tables.exactImageNames.exactIndex(base) { return tables.exactImageRoles[known] }
        if tables.machineryImages.matches(base, exact: false) { return .machinery }
        if tables.systemImages.matches(base, exact: false)
            || ((slash > image.lowerBound || !tables.systemPathsNeedSlash) && tables.systemPaths.matches(name))
        {
            return .system
        }
        // A dotted or path-like module (`django.core.handlers`, `node:internal/timers`).
        var root = image.lowerBound
        while root < image.upperBound {
            let b = src[root]
            if b == UInt8(ascii: ".") || b == UInt8(ascii: ":") || b == UInt8(ascii: "/") { break }
            root += 1
        }
        if root < image.upperBound && root > image.lowerBound && tables.systemImages.matches(src[image.lowerBound..<root]) {
            return .system
        }
        return .app
    }

    /// Where the mark starts, when the frame (trimmed to `end`) ends with it.
    static func markStart(_ src: UnsafeBufferPointer<UInt8>, _ end: Int, _ mark: StaticString) -> Int? {
        let n = mark.utf8CodeUnitCount
        guard end >= n else { return nil }
        let p = mark.utf8Start
        for m in 0..<n where src[end - n + m] != p[m] { return nil }
        var cut = end - n
        while cut > 0 && Bytes.isSpace(src[cut - 1]) { cut -= 1 }
        return cut
    }
}

/// The roles of the images this thread has looked up: a stack names a few images many times
/// (`UIKitCore`, `CoreFoundation`, the app), and one app's stacks name the same few. A role
/// depends on the name and `FrameTable` only, so it is kept across stacks: up to 16 names of
/// up to 30 bytes, each compared whole before its role is reused, the oldest replaced first.
/// Per thread (like ``FixedPointMemo``), so that no lock is taken.
struct ImageMemo {
    static let capacity = 16
    /// The count and the next entry to replace (padded to 32 bytes), then the entries.
    static let byteCount = 32 + capacity * 32
    private let storage: UnsafeMutablePointer<UInt8>?

    /// A memo that remembers nothing (one frame classified on its own).
    static var none: ImageMemo { ImageMemo(storage: nil) }

    /// This thread's memo (empty on first use), or one that remembers nothing when none can
    /// be made.
    static func forThisThread() -> ImageMemo { ImageMemo(storage: threadStorage()) }

    /// Each entry: its length, its role, then up to 30 bytes of name.
    func role(of name: UnsafeBufferPointer<UInt8>) -> FrameRole? {
        guard let storage, let p = name.baseAddress, name.count <= 30 else { return nil }
        for i in 0..<Int(storage[0]) {
            let entry = storage + 32 + 32 * i
            if Int(entry[0]) == name.count && Bytes.equal(entry + 2, p, name.count) {
                switch entry[1] {
                case 0: return .app
                case 1: return .system
                default: return .machinery
                }
            }
        }
        return nil
    }

    func remember(_ name: UnsafeBufferPointer<UInt8>, _ role: FrameRole) {
        guard let storage, let p = name.baseAddress, name.count <= 30 else { return }
        let count = Int(storage[0])
        let slot = count < Self.capacity ? count : Int(storage[1])
        if count < Self.capacity { storage[0] = UInt8(count + 1) } else { storage[1] = UInt8((slot + 1) % Self.capacity) }
        let entry = storage + 32 + 32 * slot
        entry[0] = UInt8(name.count)
        switch role {
        case .app: entry[1] = 0
        case .system: entry[1] = 1
        case .machinery: entry[1] = 2
        }
        (entry + 2).update(from: p, count: name.count)
    }

    @inline(__always) private static func threadStorage() -> UnsafeMutablePointer<UInt8>? {
        guard let key else { return nil }
        if let memo = pthread_getspecific(key) { return memo.assumingMemoryBound(to: UInt8.self) }
        guard let memo = calloc(1, byteCount) else { return nil }
        guard pthread_setspecific(key, memo) == 0 else {
            free(memo)
            return nil
        }
        return memo.assumingMemoryBound(to: UInt8.self)
    }

    /// The thread-specific key, with `free` as the destructor run when a thread ends.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, { free($0) }) == 0 ? key : nil
    }()
}

/// The image and symbol byte ranges of one frame.
struct FrameParts {
    var image: Range<Int>?
    /// The symbol, except in an Apple frame: there it is read on first need
    /// (``symbol(in:)``), as most frames are classified by their image alone.
    private var knownSymbol: Range<Int>?
    /// Apple frames: where the address starts (the symbol follows it); -1 otherwise.
    private var appleAddress = -1
    private let end: Int

    /// Apple frames: where the address starts; nil for every other shape.
    var appleAddressStart: Int? { appleAddress >= 0 ? appleAddress : nil }

    /// The symbol's byte range in `src`, the frame's text this was read from.
    func symbol(in src: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        guard appleAddress >= 0, let p = src.baseAddress else { return knownSymbol }
        let k3 = Bytes.skipSpaces(p, Bytes.tokenEnd(p, appleAddress, end), end)
        if k3 < end && !Self.isAddress(src, k3, end) { return k3..<Self.beforeOffset(src, k3, end) }
        return nil
    }

    @inline(__always) static func isAddress(_ src: UnsafeBufferPointer<UInt8>, _ k: Int, _ end: Int) -> Bool {
        k + 1 < end && src[k] == UInt8(ascii: "0") && src[k + 1] | 0x20 == UInt8(ascii: "x")
    }

    /// The last ` + ` (a symbol's offset) in `[from, to)`, or `to`.
    static func beforeOffset(_ src: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) -> Int {
        var m = to - 1
        while m > from + 1 {
            if src[m] == UInt8(ascii: "+") && Bytes.isSpace(src[m - 1]) {
                var s = m - 1
                while s > from && Bytes.isSpace(src[s - 1]) { s -= 1 }
                return s
            }
            m -= 1
        }
        return to
    }

    init(_ src: UnsafeBufferPointer<UInt8>, end: Int) {
        self.end = end
        @inline(__always) func at(_ k: Int) -> UInt8 { k < end ? src[k] : 0 }
        guard let p = src.baseAddress else { return }
        @inline(__always) func skipSpaces(_ k: Int) -> Int { Bytes.skipSpaces(p, k, end) }
        @inline(__always) func tokenEnd(_ k: Int) -> Int { Bytes.tokenEnd(p, k, end) }
        @inline(__always) func isAddress(_ k: Int) -> Bool { Self.isAddress(src, k, end) }
        @inline(__always) func beforeOffset(_ from: Int, _ to: Int) -> Int { Self.beforeOffset(src, from, to) }
        var symbol: Range<Int>?
        defer { knownSymbol = symbol }

        // The common Apple frame, `3   Image   0x1a2b3c symbol + 4`, read without the general
        // index loop below: for a line that starts with digits and a space, then a letter
        // other than `f` (no `frame #`, `#`, `*`, `[ra]` or second index can follow), that
        // loop stops at the letter, and the reading goes on as here.
        if Bytes.isDigit(p[0]) {
            var d = 1
            while d < end && Bytes.isDigit(p[d]) { d += 1 }
            if d < end && p[d] == Bytes.space {
                let j = skipSpaces(d)
                if j < end && Bytes.isAlpha(p[j]) && p[j] != UInt8(ascii: "f") {
                    let t1 = tokenEnd(j)
                    let k2 = skipSpaces(t1)
                    if isAddress(k2) {
                        image = j..<t1
                        appleAddress = k2
                        return
                    }
                }
            }
        }

        // The frame's index: `3 `, `#3 `, `* frame #3: `, `[ra] `.
        var j = skipSpaces(0)
        while true {
            let start = j
            if at(j) == UInt8(ascii: "*") && at(j + 1) == Bytes.space { j = skipSpaces(j + 1) }
            if at(j) == UInt8(ascii: "f"), end - j > 7, src[j + 1] == UInt8(ascii: "r"), src[j + 2] == UInt8(ascii: "a"),
                src[j + 3] == UInt8(ascii: "m"), src[j + 4] == UInt8(ascii: "e"), src[j + 5] == Bytes.space,
                src[j + 6] == UInt8(ascii: "#")
            {
                j += 7
            }
            if at(j) == UInt8(ascii: "#") { j += 1 }
            var d = j
            while Bytes.isDigit(at(d)) { d += 1 }
            if d > j {
                if at(d) == UInt8(ascii: ":") { d += 1 }
                if d >= end || Bytes.isSpace(src[d]) { j = skipSpaces(d) }
            }
            if at(j) == UInt8(ascii: "["), at(j + 1) == UInt8(ascii: "r"), at(j + 2) == UInt8(ascii: "a"),
                at(j + 3) == UInt8(ascii: "]")
            {
                j = skipSpaces(j + 4)
            }
            if j == start { break }
        }
        guard j < end else { return }

        let t1 = tokenEnd(j)
        if isAddress(j) {
            // Swift backtracer or LLDB: the address first.
            let k = skipSpaces(t1)
            guard k < end else { return }
            var tick = k
            while tick < end && !Bytes.isSpace(src[tick]) && src[tick] != UInt8(ascii: "`") { tick += 1 }
            if at(tick) == UInt8(ascii: "`") {
                image = k..<tick
                var s = tick + 1
                while s + 3 < end
                    && !(src[s] == Bytes.space && src[s + 1] == UInt8(ascii: "a") && src[s + 2] == UInt8(ascii: "t")
                        && src[s + 3] == Bytes.space)
                {
                    s += 1
                }
                symbol = (tick + 1)..<beforeOffset(tick + 1, s + 3 < end ? s : end)
                return
            }
            // `symbol + 16 in image at file`: the image follows the last ` in `.
            var inAt = -1
            var m = k
            while m + 3 < end {
                if src[m] == Bytes.space && src[m + 1] == UInt8(ascii: "i") && src[m + 2] == UInt8(ascii: "n")
                    && src[m + 3] == Bytes.space
                {
                    inAt = m
                }
                m += 1
            }
            if inAt >= 0 {
                let s = skipSpaces(inAt + 4)
                image = s..<tokenEnd(s)
                symbol = k..<beforeOffset(k, inAt)
            } else {
                symbol = k..<beforeOffset(k, end)
            }
            return
        }
        let k2 = skipSpaces(t1)
        if isAddress(k2) {
            // Apple crash log and the SDK: image, address, then symbol (or load address + offset).
            image = j..<t1
            appleAddress = k2
            return
        }
        if src[end - 1] == UInt8(ascii: ")") || src[end - 1] == UInt8(ascii: "]") {
            // Sentry: `function (where)`; glibc: `path(symbol+0x12)[0x...]`.
            var open = -1
            var m = end - 1
            while m > j {
                if src[m] == UInt8(ascii: "(") {
                    open = m
                    if src[end - 1] == UInt8(ascii: "]") {
                        // glibc: the first `(` of the text after the path.
                        var first = j
                        while first < end && src[first] != UInt8(ascii: "(") { first += 1 }
                        open = first
                    }
                    break
                }
                m -= 1
            }
            if open > j {
                if Bytes.isSpace(src[open - 1]) && src[end - 1] == UInt8(ascii: ")") {
                    var s = open - 1
                    while s > j && Bytes.isSpace(src[s - 1]) { s -= 1 }
                    symbol = j..<s
                    image = (open + 1)..<(end - 1)
                } else {
                    image = j..<open
                    var close = open + 1
                    while close < end && src[close] != UInt8(ascii: "+") && src[close] != UInt8(ascii: ")") { close += 1 }
                    if close > open + 1 { symbol = (open + 1)..<close }
                }
                return
            }
        }
        symbol = j..<end
    }
}
