/// What the server needs to know about an uploaded ELF file: its GNU build id (the key
/// frames are matched by), the lowest address its loadable segments ask for (to turn an
/// image offset into the address its DWARF uses) and whether it carries DWARF at all.
///
/// Only headers are read, bounds-checked against the bytes given: a truncated or hostile
/// file is refused, never read past.
public struct ELFDebugFile: Sendable, Equatable {
    /// GNU build id, lowercase hex.
    public var buildID: String
    /// Lowest `p_vaddr` of a `PT_LOAD` segment (0 for PIE executables and shared libraries).
    /// The SDK's image base is the address that segment was loaded at.
    public var loadAddress: UInt64
    /// A `.debug_info` section with contents: file:line and inlined frames can be resolved.
    public var hasDebugInfo: Bool
    /// A symbol table (`.symtab`): function names at least.
    public var hasSymbols: Bool

    /// Why a file was refused.
    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        private enum Code: Equatable { case notELF, truncated, noBuildID }
        private let code: Code
        public static let notELF = Error(code: .notELF)
        public static let truncated = Error(code: .truncated)
        public static let noBuildID = Error(code: .noBuildID)
        public var description: String {
            switch code {
            case .notELF: "not an ELF file"
            case .truncated: "a truncated or malformed ELF file"
            case .noBuildID: "the ELF file has no GNU build id (link with -Wl,--build-id)"
            }
        }
    }

    /// Reads the headers of `bytes`.
    public init(parsing bytes: some Collection<UInt8>) throws(Error) {
        let data = Array(bytes)
        guard data.count >= 16, data[0] == 0x7f, data[1] == 0x45, data[2] == 0x4c, data[3] == 0x46 else {
            throw .notELF
        }
        guard data[4] == 1 || data[4] == 2, data[5] == 1 || data[5] == 2 else { throw .notELF }
        let reader = Reader(data: data, is64: data[4] == 2, little: data[5] == 1)
        let r = reader
        let headerSize = r.is64 ? 64 : 52
        guard data.count >= headerSize else { throw .truncated }
        let phoff = try r.word(at: r.is64 ? 32 : 28)
        let shoff = try r.word(at: r.is64 ? 40 : 32)
        let phentsize = try r.u16(at: r.is64 ? 54 : 42)
        let phnum = try r.u16(at: r.is64 ? 56 : 44)
        let shentsize = try r.u16(at: r.is64 ? 58 : 46)
        let shnum = try r.u16(at: r.is64 ? 60 : 48)
        let shstrndx = try r.u16(at: r.is64 ? 62 : 50)

        var buildID: String?
        var low = UInt64.max
        // Program headers: the loadable segments and, in a linked binary, the note segment.
        if phoff > 0, phnum > 0 {
            guard phentsize >= (r.is64 ? 56 : 32) else { throw .truncated }
            for i in 0..<UInt64(phnum) {
                let at = try r.offset(phoff, plus: i * UInt64(phentsize))
                let type = try r.u32(at: at)
                let vaddr = try r.word(at: at + (r.is64 ? 16 : 8))
                if type == 1 { low = min(low, vaddr) }  // PT_LOAD
                if type == 4, buildID == nil {  // PT_NOTE
                    let offset = try r.word(at: at + (r.is64 ? 8 : 4))
                    let size = try r.word(at: at + (r.is64 ? 32 : 16))
                    buildID = try r.buildIDNote(offset: offset, size: size)
                }
            }
        }
        // Section headers: notes kept by `objcopy --only-keep-debug` (whose note segment may
        // have no file contents), `.debug_info` and `.symtab`.
        var hasDebugInfo = false
        var hasSymbols = false
        if shoff > 0, shnum > 0, shstrndx < shnum {
            guard shentsize >= (r.is64 ? 64 : 40) else { throw .truncated }
            let names = try r.offset(shoff, plus: UInt64(shstrndx) * UInt64(shentsize))
            let namesOffset = try r.word(at: names + (r.is64 ? 24 : 16))
            for i in 0..<UInt64(shnum) {
                let at = try r.offset(shoff, plus: i * UInt64(shentsize))
                let nameIndex = UInt64(try r.u32(at: at))
                let type = try r.u32(at: at + 4)
                let offset = try r.word(at: at + (r.is64 ? 24 : 16))
                let size = try r.word(at: at + (r.is64 ? 32 : 20))
                let name = r.cString(at: namesOffset &+ nameIndex)
                if type == 7, buildID == nil {  // SHT_NOTE
                    buildID = try r.buildIDNote(offset: offset, size: size)
                }
                if name == ".debug_info", type != 8, size > 0 { hasDebugInfo = true }  // not SHT_NOBITS
                if type == 2, size > 0 { hasSymbols = true }  // SHT_SYMTAB
            }
        }
        guard let buildID, !buildID.isEmpty else { throw .noBuildID }
        self.buildID = buildID
        self.loadAddress = low == .max ? 0 : low
        self.hasDebugInfo = hasDebugInfo
        self.hasSymbols = hasSymbols
    }

    /// A build id as the SDK sends it and the server keys files by: 2 to 64 bytes of lowercase hex.
    public static func isBuildID(_ text: some StringProtocol) -> Bool {
        text.utf8.count >= 4 && text.utf8.count <= 128 && text.utf8.count % 2 == 0
            && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    private struct Reader {
        let data: [UInt8]
        let is64: Bool
        let little: Bool

        func offset(_ base: UInt64, plus delta: UInt64) throws(Error) -> Int {
            let (sum, overflow) = base.addingReportingOverflow(delta)
            guard !overflow, sum < UInt64(data.count) else { throw .truncated }
            return Int(sum)
        }

        func bytes(at offset: Int, _ count: Int) throws(Error) -> ArraySlice<UInt8> {
            guard offset >= 0, count >= 0, offset <= data.count - count else { throw .truncated }
            return data[offset..<(offset + count)]
        }

        func integer(at offset: Int, _ count: Int) throws(Error) -> UInt64 {
            let slice = try bytes(at: offset, count)
            let ordered = little ? Array(slice.reversed()) : Array(slice)
            return ordered.reduce(0) { $0 << 8 | UInt64($1) }
        }

        func u16(at offset: Int) throws(Error) -> UInt16 { UInt16(try integer(at: offset, 2)) }
        func u32(at offset: Int) throws(Error) -> UInt32 { UInt32(try integer(at: offset, 4)) }
        func word(at offset: Int) throws(Error) -> UInt64 { try integer(at: offset, is64 ? 8 : 4) }

        func cString(at offset: UInt64) -> String {
            guard offset < UInt64(data.count) else { return "" }
            let start = Int(offset)
            let end = data[start...].prefix(256).firstIndex(of: 0) ?? start
            return String(decoding: data[start..<end], as: UTF8.self)
        }

        /// The `NT_GNU_BUILD_ID` descriptor among the notes at `offset`, hex; `nil` when
        /// the notes have none or lie outside the file (a `NOBITS` note section).
        func buildIDNote(offset: UInt64, size: UInt64) throws(Error) -> String? {
            guard offset < UInt64(data.count), size <= UInt64(data.count) - offset else { return nil }
            var at = Int(offset)
            let end = Int(offset + size)
            func align4(_ n: Int) -> Int { (n + 3) & ~3 }
            while at + 12 <= end {
                let nameSize = Int(try u32(at: at))
                let descSize = Int(try u32(at: at + 4))
                let type = try u32(at: at + 8)
                let nameStart = at + 12
                guard nameSize <= end - nameStart else { return nil }
                let descStart = nameStart + align4(nameSize)
                guard descStart <= end, descSize <= end - descStart else { return nil }
                let name = data[nameStart..<(nameStart + nameSize)]
                if type == 3, Array(name) == Array("GNU\0".utf8), descSize > 0 {
                    return data[descStart..<(descStart + descSize)].map {
                        String($0 >> 4, radix: 16) + String($0 & 0xf, radix: 16)
                    }.joined()
                }
                at = descStart + align4(descSize)
            }
            return nil
        }
    }
}
