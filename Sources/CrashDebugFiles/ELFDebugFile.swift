/// What the server needs to know about an uploaded ELF file: its GNU build id (the key
/// frames are matched by), the lowest address its loadable segments ask for (to turn an
/// image offset into the address its DWARF uses), whether it carries DWARF at all, and
/// where the file names other files (``lookupPatches``).
///
/// Only headers, note regions and the DWARF abbreviation tables are read, bounds-checked
/// against the bytes given, in work linear in the file's size: at most ``maxHeaders``
/// program and section headers, each note region read once however many headers point at
/// it, note segments (and note sections) that overlap refused. A truncated or hostile file
/// is refused, never read past.
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
    /// Byte changes that make the file name no other file: the type of its build-id notes
    /// cleared (a symbolizer looks a build id up in debug directories and debuginfod caches),
    /// the names of its `.gnu_debuglink` and `.gnu_debugaltlink` sections cleared (a debug
    /// link is a path the symbolizer would open), and in its DWARF abbreviations the
    /// split-DWARF attributes (`DW_AT_dwo_name`, `DW_AT_GNU_dwo_name`: the path of a `.dwo`
    /// file) renamed to an attribute no reader looks up. An abbreviation section that cannot be read through
    /// (compressed, or malformed) has its name cleared instead: no DWARF is read from it.
    /// The symbolizer only ever sees a copy with these applied.
    public var lookupPatches: [Patch]

    /// `bytes` written at `offset`, the same count as they replace.
    public struct Patch: Sendable, Equatable {
        public var offset: Int
        public var bytes: [UInt8]
    }

    /// Most program headers, and most section headers, a file may have.
    public static let maxHeaders = 4096
    /// Longest GNU build id, in bytes (SHA-1 ids are 20; the SDK and the database take 64).
    public static let maxBuildIDBytes = 64

    /// Why a file was refused.
    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        private enum Code: Equatable { case notELF, truncated, noBuildID, tooManyHeaders, badBuildID, noteOutOfBounds, overlappingNotes }
        private let code: Code
        public static let notELF = Error(code: .notELF)
        public static let truncated = Error(code: .truncated)
        public static let noBuildID = Error(code: .noBuildID)
        public static let tooManyHeaders = Error(code: .tooManyHeaders)
        public static let badBuildID = Error(code: .badBuildID)
        public static let noteOutOfBounds = Error(code: .noteOutOfBounds)
        public static let overlappingNotes = Error(code: .overlappingNotes)
        public var description: String {
            switch code {
            case .notELF: "not an ELF file"
            case .truncated: "a truncated or malformed ELF file"
            case .noBuildID: "the ELF file has no GNU build id (link with -Wl,--build-id)"
            case .tooManyHeaders: "more than \(ELFDebugFile.maxHeaders) program or section headers"
            case .badBuildID: "a GNU build id must be 2 to \(ELFDebugFile.maxBuildIDBytes) bytes"
            case .noteOutOfBounds: "a note runs past the end of its segment or section"
            case .overlappingNotes: "two note segments or two note sections overlap"
            }
        }
    }

    /// Reads the headers of `bytes`.
    public init(parsing bytes: some Collection<UInt8>) throws(Error) {
        let parsed: Result<ELFDebugFile, Error>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(Error) in try ELFDebugFile(parsing: UnsafeRawBufferPointer(buffer)) }
        }
        if let parsed {
            self = try parsed.get()
        } else {
            let copy = Array(bytes).withUnsafeBytes { buffer in
                Result { () throws(Error) in try ELFDebugFile(parsing: buffer) }
            }
            self = try copy.get()
        }
    }

    /// Reads the headers of the file in `data` (a mapped file, or a buffer).
    public init(parsing data: UnsafeRawBufferPointer) throws(Error) {
        let headers = try Self.read(data)
        guard let buildID = headers.buildID else { throw .noBuildID }
        self.buildID = buildID
        self.loadAddress = headers.loadAddress
        self.hasDebugInfo = headers.hasDebugInfo
        self.hasSymbols = headers.hasSymbols
        self.lookupPatches = headers.lookupPatches
    }

    /// The ``lookupPatches`` a file still needs, with or without a build id: empty for a copy
    /// whose patches were applied (the check made before a symbolizer may read it).
    public static func remainingLookups(in data: UnsafeRawBufferPointer) throws(Error) -> [Patch] {
        try read(data).lookupPatches
    }

    /// What ``init(parsing:)`` reads, the build id optional.
    private struct Headers {
        var buildID: String?
        var loadAddress: UInt64
        var hasDebugInfo: Bool
        var hasSymbols: Bool
        var lookupPatches: [Patch]
    }

    private static func read(_ data: UnsafeRawBufferPointer) throws(Error) -> Headers {
        guard data.count >= 16, data[0] == 0x7f, data[1] == 0x45, data[2] == 0x4c, data[3] == 0x46 else {
            throw .notELF
        }
        guard data[4] == 1 || data[4] == 2, data[5] == 1 || data[5] == 2 else { throw .notELF }
        let r = Reader(data: data, is64: data[4] == 2, little: data[5] == 1)
        guard data.count >= (r.is64 ? 64 : 52) else { throw .truncated }
        let phoff = try r.word(at: r.is64 ? 32 : 28)
        let shoff = try r.word(at: r.is64 ? 40 : 32)
        let phentsize = try r.u16(at: r.is64 ? 54 : 42)
        var phnum = UInt64(try r.u16(at: r.is64 ? 56 : 44))
        let shentsize = try r.u16(at: r.is64 ? 58 : 46)
        var shnum = UInt64(try r.u16(at: r.is64 ? 60 : 48))
        var shstrndx = UInt64(try r.u16(at: r.is64 ? 62 : 50))

        // Counts that do not fit their 16-bit fields live in section 0 (`PN_XNUM` in
        // `sh_info`, `e_shnum` 0 in `sh_size`, `SHN_XINDEX` in `sh_link`).
        let sectionHeaderSize = UInt64(r.is64 ? 64 : 40)
        if shoff > 0, phnum == 0xffff || shnum == 0 || shstrndx == 0xffff {
            guard UInt64(shentsize) >= sectionHeaderSize else { throw .truncated }
            let zero = try r.offset(shoff, plus: 0, length: sectionHeaderSize)
            if phnum == 0xffff { phnum = UInt64(try r.u32(at: zero + (r.is64 ? 44 : 28))) }
            if shnum == 0 { shnum = try r.word(at: zero + (r.is64 ? 32 : 20)) }
            if shstrndx == 0xffff { shstrndx = UInt64(try r.u32(at: zero + (r.is64 ? 40 : 24))) }
        }
        guard phnum <= maxHeaders, shnum <= maxHeaders else { throw .tooManyHeaders }

        var notes = NoteScan()
        var low = UInt64.max
        // Program headers: the loadable segments and, in a linked binary, the note segments.
        if phoff > 0, phnum > 0 {
            guard phentsize >= (r.is64 ? 56 : 32) else { throw .truncated }
            var regions: [Region] = []
            for i in 0..<phnum {
                let at = try r.offset(phoff, plus: i * UInt64(phentsize), length: UInt64(phentsize))
                let type = try r.u32(at: at)
                if type == 1 { low = min(low, try r.word(at: at + (r.is64 ? 16 : 8))) }  // PT_LOAD
                if type == 4 {  // PT_NOTE
                    let offset = try r.word(at: at + (r.is64 ? 8 : 4))
                    let size = try r.word(at: at + (r.is64 ? 32 : 16))
                    let align = try r.word(at: at + (r.is64 ? 48 : 28))
                    regions.append(Region(offset: offset, size: size, align: align))
                }
            }
            try notes.scan(Region.checked(regions), in: r)
        }
        // Section headers: notes kept by `objcopy --only-keep-debug` (whose note segment may
        // have no file contents), `.debug_info`, `.symtab`, the debug links and the
        // abbreviation tables.
        var hasDebugInfo = false
        var hasSymbols = false
        var patches: [Patch] = []
        if shoff > 0, shnum > 0 {
            guard UInt64(shentsize) >= sectionHeaderSize else { throw .truncated }
            var names: Region?
            if shstrndx < shnum {
                let at = try r.offset(shoff, plus: shstrndx * UInt64(shentsize), length: sectionHeaderSize)
                names = Region(offset: try r.word(at: at + (r.is64 ? 24 : 16)), size: try r.word(at: at + (r.is64 ? 32 : 20)), align: 1)
            }
            var regions: [Region] = []
            for i in 0..<shnum {
                let at = try r.offset(shoff, plus: i * UInt64(shentsize), length: sectionHeaderSize)
                let type = try r.u32(at: at + 4)
                let flags = try r.word(at: at + 8)
                let offset = try r.word(at: at + (r.is64 ? 24 : 16))
                let size = try r.word(at: at + (r.is64 ? 32 : 20))
                let nameIndex = UInt64(try r.u32(at: at))
                let name = names.map { r.name(at: nameIndex, in: $0) } ?? .other
                if type == 7 {  // SHT_NOTE
                    regions.append(Region(offset: offset, size: size, align: try r.word(at: at + (r.is64 ? 48 : 32))))
                }
                if type == 2, size > 0 { hasSymbols = true }  // SHT_SYMTAB
                guard type != 8 else { continue }  // SHT_NOBITS: no contents in the file
                switch name {
                case .debugInfo where size > 0: hasDebugInfo = true
                case .debugLink: patches.append(Patch(offset: at, bytes: [0, 0, 0, 0]))
                case .debugAbbrev:
                    let compressed = flags & 0x800 != 0  // SHF_COMPRESSED
                    if compressed || name == .compressedDebugAbbrev
                        || !r.splitDWARFAttributes(in: Region(offset: offset, size: size, align: 1), into: &patches)
                    {
                        patches.append(Patch(offset: at, bytes: [0, 0, 0, 0]))
                    }
                case .compressedDebugAbbrev: patches.append(Patch(offset: at, bytes: [0, 0, 0, 0]))
                default: break
                }
            }
            // A section whose notes a note segment already covered is not read again.
            let unread = try Region.checked(regions).filter { section in !notes.covered(section) }
            try notes.scan(unread, in: r)
        }
        return Headers(
            buildID: notes.buildID, loadAddress: low == .max ? 0 : low, hasDebugInfo: hasDebugInfo, hasSymbols: hasSymbols,
            lookupPatches: notes.patches + patches)
    }

    /// A build id as the SDK sends it and the server keys files by: 2 to 64 bytes of lowercase hex.
    public static func isBuildID(_ text: some StringProtocol) -> Bool {
        text.utf8.count >= 4 && text.utf8.count <= 2 * maxBuildIDBytes && text.utf8.count % 2 == 0
            && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    /// A note segment or section.
    private struct Region {
        var offset: UInt64
        var size: UInt64
        var align: UInt64

        /// Where the region ends, saturating: a hostile offset plus size may not fit 64 bits.
        var end: UInt64 {
            let (sum, overflow) = offset.addingReportingOverflow(size)
            return overflow ? .max : sum
        }

        /// The regions with contents, by offset; `overlappingNotes` when two share a byte.
        static func checked(_ regions: [Region]) throws(Error) -> [Region] {
            let sorted = regions.filter { $0.size > 0 }.sorted { ($0.offset, $0.size) < ($1.offset, $1.size) }
            for (a, b) in zip(sorted, sorted.dropFirst()) {
                let (end, overflow) = a.offset.addingReportingOverflow(a.size)
                if overflow || b.offset < end { throw .overlappingNotes }
            }
            return sorted
        }
    }

    /// The notes read so far: which regions, and the build id among them.
    private struct NoteScan {
        var buildID: String?
        var read: [Region] = []
        /// The type of each build-id note, to clear in the symbolizer's copy.
        var patches: [Patch] = []

        func covered(_ region: Region) -> Bool {
            read.contains { region.offset >= $0.offset && region.end <= $0.end }
        }

        /// Reads each region's notes once. A region wholly outside the file (a note segment
        /// of a separate debug file, whose contents were dropped) holds nothing to read.
        mutating func scan(_ regions: [Region], in r: Reader) throws(Error) {
            for region in regions {
                guard region.offset < UInt64(r.data.count), region.size <= UInt64(r.data.count) - region.offset else { continue }
                try scan(region, in: r)
                read.append(region)
            }
        }

        private mutating func scan(_ region: Region, in r: Reader) throws(Error) {
            // As readers of notes do: name and descriptor each start aligned from the start of
            // the region (8 for an 8-aligned one, such as `.note.gnu.property`, 4 otherwise).
            let align = region.align == 8 ? 8 : 4
            let start = Int(region.offset)
            func padded(_ at: Int) -> Int { start + ((at - start + align - 1) & ~(align - 1)) }
            var at = start
            let end = Int(region.offset + region.size)
            while at < end {
                guard end - at >= 12 else { throw .noteOutOfBounds }
                let nameSize = Int(try r.u32(at: at))
                let descSize = Int(try r.u32(at: at + 4))
                let type = try r.u32(at: at + 8)
                let nameStart = at + 12
                guard nameSize <= end - nameStart else { throw .noteOutOfBounds }
                let descStart = padded(nameStart + nameSize)
                guard descStart <= end, descSize <= end - descStart else { throw .noteOutOfBounds }
                let isGNU =
                    nameSize == 4 && r.data[nameStart] == 0x47 && r.data[nameStart + 1] == 0x4e && r.data[nameStart + 2] == 0x55
                    && r.data[nameStart + 3] == 0
                if type == 3, isGNU {  // NT_GNU_BUILD_ID
                    guard descSize <= ELFDebugFile.maxBuildIDBytes else { throw .badBuildID }
                    patches.append(Patch(offset: at + 8, bytes: [0, 0, 0, 0]))
                    if buildID == nil {
                        guard descSize >= 2 else { throw .badBuildID }
                        let digits = Array("0123456789abcdef".utf8)
                        var hex: [UInt8] = []
                        hex.reserveCapacity(2 * descSize)
                        for byte in r.data[descStart..<(descStart + descSize)] {
                            hex.append(digits[Int(byte >> 4)])
                            hex.append(digits[Int(byte & 0xf)])
                        }
                        buildID = String(decoding: hex, as: UTF8.self)
                    }
                }
                at = padded(descStart + descSize)
            }
        }
    }

    private enum SectionName: Equatable { case debugInfo, debugLink, debugAbbrev, compressedDebugAbbrev, other }

    private struct Reader {
        let data: UnsafeRawBufferPointer
        let is64: Bool
        let little: Bool

        /// `base + delta` as an index, with `length` bytes from it inside the data.
        func offset(_ base: UInt64, plus delta: UInt64, length: UInt64) throws(Error) -> Int {
            let (sum, overflow) = base.addingReportingOverflow(delta)
            guard !overflow, sum <= UInt64(data.count), length <= UInt64(data.count) - sum else { throw .truncated }
            return Int(sum)
        }

        func integer(at offset: Int, _ count: Int) throws(Error) -> UInt64 {
            guard offset >= 0, offset <= data.count - count else { throw .truncated }
            var value: UInt64 = 0
            for i in 0..<count {
                let byte = UInt64(data[little ? offset + count - 1 - i : offset + i])
                value = value << 8 | byte
            }
            return value
        }

        func u16(at offset: Int) throws(Error) -> UInt16 { UInt16(try integer(at: offset, 2)) }
        func u32(at offset: Int) throws(Error) -> UInt32 { UInt32(try integer(at: offset, 4)) }
        func word(at offset: Int) throws(Error) -> UInt64 { try integer(at: offset, is64 ? 8 : 4) }

        /// The section name at `index` of the string table `names`, among those this reader
        /// looks for (compared in place: no string is built).
        func name(at index: UInt64, in names: Region) -> SectionName {
            guard names.offset < UInt64(data.count), names.size <= UInt64(data.count) - names.offset, index < names.size else {
                return .other
            }
            let start = Int(names.offset + index)
            let end = Int(names.offset + names.size)
            func equals(_ text: StaticString) -> Bool {
                let count = text.utf8CodeUnitCount
                guard end - start > count, data[start + count] == 0 else { return false }
                return text.withUTF8Buffer { text in (0..<count).allSatisfy { data[start + $0] == text[$0] } }
            }
            if equals(".debug_info") { return .debugInfo }
            if equals(".gnu_debuglink") || equals(".gnu_debugaltlink") { return .debugLink }
            if equals(".debug_abbrev") { return .debugAbbrev }
            if equals(".zdebug_abbrev") { return .compressedDebugAbbrev }
            return .other
        }

        /// Appends a patch for each split-DWARF attribute of the abbreviation tables in
        /// `region`; false when the tables cannot be read to their end.
        func splitDWARFAttributes(in region: Region, into patches: inout [Patch]) -> Bool {
            DWARFAbbreviations.splitDWARFAttributes(in: data, offset: region.offset, size: region.size, into: &patches)
        }
    }
}
