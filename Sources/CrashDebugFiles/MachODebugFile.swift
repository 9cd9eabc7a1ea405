/// What the server needs to know about an uploaded Mach-O file (an executable, dynamic
/// library, bundle or the DWARF companion inside a dSYM): one ``Slice`` per architecture,
/// each with its `LC_UUID` (the debug id frames are matched by), its architecture, the
/// address its `__TEXT` segment asks for, whether it carries DWARF and whether it has a
/// symbol table. A thin file is one slice; a fat (universal) file, `fat_arch` or
/// `fat_arch_64`, one per architecture, each read as a thin file at its offset.
///
/// Only the fat header, the Mach-O headers and the load commands are read, bounds-checked
/// against the bytes given, in work linear in the file's size: at most ``maxArchitectures``
/// slices, which may not overlap, at most ``maxLoadCommands`` load commands per slice, each
/// inside `sizeofcmds`, and each segment's sections inside its command. A truncated or
/// hostile file is refused, never read past.
public struct MachODebugFile: Sendable, Equatable {
    /// One architecture's Mach-O image.
    public struct Slice: Sendable, Equatable {
        /// `LC_UUID`, lower case with dashes (`4c4c44c3-5555-3144-a1ba-4a50e9993811`).
        public var debugID: String
        /// `arm64`, `arm64e`, `x86_64`, `armv7`... (`cpu<type>` for a type without a name).
        public var arch: String
        /// Where the slice starts in the file, and its size (the whole file when thin).
        public var offset: Int
        public var size: Int
        /// `vmaddr` of the `__TEXT` segment: 0x100000000 for an executable, 0 for a dylib.
        /// An image offset plus this is the address its DWARF and symbols use.
        public var textAddress: UInt64
        /// A `__debug_info` section with contents: file:line and inlined frames.
        public var hasDebugInfo: Bool
        /// An `LC_SYMTAB` with at least one symbol: function names at least.
        public var hasSymbols: Bool
        /// Byte changes (offsets within the slice) that make the image name no other file: in
        /// its `__debug_abbrev` the split-DWARF attributes (the path of a `.dwo` file, also
        /// written by Clang's module debug info) renamed to one no reader looks up, or, when
        /// the tables cannot be read through, the section's name cleared (no DWARF is read).
        public var lookupPatches: [ELFDebugFile.Patch] = []

        public init(
            debugID: String, arch: String, offset: Int, size: Int, textAddress: UInt64, hasDebugInfo: Bool, hasSymbols: Bool,
            lookupPatches: [ELFDebugFile.Patch] = []
        ) {
            self.debugID = debugID
            self.arch = arch
            self.offset = offset
            self.size = size
            self.textAddress = textAddress
            self.hasDebugInfo = hasDebugInfo
            self.hasSymbols = hasSymbols
            self.lookupPatches = lookupPatches
        }
    }

    /// The file's architectures, in the file's order.
    public var slices: [Slice]

    /// Most architectures a fat file may hold.
    public static let maxArchitectures = 32
    /// Most load commands one Mach-O image may have.
    public static let maxLoadCommands = 65_536

    /// Why a file was refused.
    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        private enum Code: Equatable {
            case notMachO, truncated, noUUID, tooManyArchitectures, overlappingArchitectures, duplicateUUID, tooManyLoadCommands
        }
        private let code: Code
        public static let notMachO = Error(code: .notMachO)
        public static let truncated = Error(code: .truncated)
        public static let noUUID = Error(code: .noUUID)
        public static let tooManyArchitectures = Error(code: .tooManyArchitectures)
        public static let overlappingArchitectures = Error(code: .overlappingArchitectures)
        public static let duplicateUUID = Error(code: .duplicateUUID)
        public static let tooManyLoadCommands = Error(code: .tooManyLoadCommands)
        public var description: String {
            switch code {
            case .notMachO: "not a Mach-O file"
            case .truncated: "a truncated or malformed Mach-O file"
            case .noUUID: "the Mach-O file has no LC_UUID (do not link with -no_uuid)"
            case .tooManyArchitectures: "a fat file of more than \(MachODebugFile.maxArchitectures) architectures"
            case .overlappingArchitectures: "two architectures of the fat file overlap"
            case .duplicateUUID: "two architectures of the fat file have the same LC_UUID"
            case .tooManyLoadCommands: "more than \(MachODebugFile.maxLoadCommands) load commands"
            }
        }
    }

    /// Whether `data` starts with a Mach-O or fat magic number (what ``init(parsing:)`` takes).
    public static func hasMagic(_ data: UnsafeRawBufferPointer) -> Bool {
        guard data.count >= 4 else { return false }
        let big = UInt32(data[0]) << 24 | UInt32(data[1]) << 16 | UInt32(data[2]) << 8 | UInt32(data[3])
        return thinMagics.contains(big) || fatMagics.contains(big) || fatMagics.contains(big.byteSwapped)
    }

    private static let thinMagics: Set<UInt32> = [0xfeed_face, 0xfeed_facf, 0xcefa_edfe, 0xcffa_edfe]
    private static let fatMagics: Set<UInt32> = [0xcafe_babe, 0xcafe_babf]

    /// Reads the headers of `bytes`.
    public init(parsing bytes: some Collection<UInt8>) throws(Error) {
        let parsed: Result<MachODebugFile, Error>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(Error) in try MachODebugFile(parsing: UnsafeRawBufferPointer(buffer)) }
        }
        if let parsed {
            self = try parsed.get()
        } else {
            let copy = Array(bytes).withUnsafeBytes { buffer in
                Result { () throws(Error) in try MachODebugFile(parsing: buffer) }
            }
            self = try copy.get()
        }
    }

    /// Reads the headers of the file in `data` (a mapped file, or a buffer).
    public init(parsing data: UnsafeRawBufferPointer) throws(Error) {
        guard data.count >= 8 else { throw data.count >= 4 && Self.hasMagic(data) ? .truncated : .notMachO }
        let big = Reader(data: data, little: false)
        let magic = try big.u32(at: 0)
        if Self.fatMagics.contains(magic) || Self.fatMagics.contains(magic.byteSwapped) {
            let r = Reader(data: data, little: !Self.fatMagics.contains(magic))
            let is64 = (r.little ? magic.byteSwapped : magic) == 0xcafe_babf
            let count = try r.u32(at: 4)
            // A Java class file starts with 0xcafebabe too, then its version (45 or more).
            guard count <= Self.maxArchitectures else { throw count >= 40 ? .notMachO : .tooManyArchitectures }
            var ranges: [(offset: UInt64, size: UInt64)] = []
            for i in 0..<Int(count) {
                let at = 8 + i * (is64 ? 32 : 20)
                let offset = is64 ? try r.u64(at: at + 8) : UInt64(try r.u32(at: at + 8))
                let size = is64 ? try r.u64(at: at + 16) : UInt64(try r.u32(at: at + 12))
                guard offset <= UInt64(data.count), size <= UInt64(data.count) - offset, size > 0 else { throw .truncated }
                ranges.append((offset, size))
            }
            let sorted = ranges.sorted { $0.offset < $1.offset }
            for (a, b) in zip(sorted, sorted.dropFirst()) where a.offset + a.size > b.offset {
                throw .overlappingArchitectures
            }
            let headerEnd = UInt64(8 + Int(count) * (is64 ? 32 : 20))
            if let first = sorted.first, first.offset < headerEnd { throw .overlappingArchitectures }
            var slices: [Slice] = []
            for range in ranges {
                let slice = UnsafeRawBufferPointer(rebasing: data[Int(range.offset)..<Int(range.offset + range.size)])
                var thin = try Self.thin(slice)
                thin.offset = Int(range.offset)
                guard !slices.contains(where: { $0.debugID == thin.debugID }) else { throw .duplicateUUID }
                slices.append(thin)
            }
            guard !slices.isEmpty else { throw .truncated }
            self.slices = slices
        } else {
            slices = [try Self.thin(data)]
        }
    }

    /// One Mach-O image (`mach_header` or `mach_header_64`, either byte order).
    private static func thin(_ data: UnsafeRawBufferPointer) throws(Error) -> Slice {
        guard data.count >= 4 else { throw .truncated }
        let magic = try Reader(data: data, little: false).u32(at: 0)
        guard thinMagics.contains(magic) else { throw .notMachO }
        let r = Reader(data: data, little: magic == 0xcefa_edfe || magic == 0xcffa_edfe)
        let is64 = magic == 0xfeed_facf || magic == 0xcffa_edfe
        let headerSize = is64 ? 32 : 28
        guard data.count >= headerSize else { throw .truncated }
        let cpuType = try r.u32(at: 4)
        let cpuSubtype = try r.u32(at: 8)
        let commands = try r.u32(at: 16)
        let commandBytes = UInt64(try r.u32(at: 20))
        guard commands <= maxLoadCommands else { throw .tooManyLoadCommands }
        guard commandBytes <= UInt64(data.count - headerSize) else { throw .truncated }
        let end = headerSize + Int(commandBytes)

        var uuid: String?
        var textAddress: UInt64?
        var hasDebugInfo = false
        var hasSymbols = false
        var patches: [ELFDebugFile.Patch] = []
        var at = headerSize
        for _ in 0..<commands {
            guard at + 8 <= end else { throw .truncated }
            let cmd = try r.u32(at: at)
            let size = Int(try r.u32(at: at + 4))
            guard size >= 8, size <= end - at else { throw .truncated }
            switch cmd {
            case 0x1b:  // LC_UUID
                guard size >= 24 else { throw .truncated }
                uuid = uuidText(data, at: at + 8)
            case 0x2:  // LC_SYMTAB
                guard size >= 24 else { throw .truncated }
                if try r.u32(at: at + 12) > 0 { hasSymbols = true }
            case 0x1, 0x19:  // LC_SEGMENT, LC_SEGMENT_64
                let segment64 = cmd == 0x19
                let fixed = segment64 ? 72 : 56
                let sectionSize = segment64 ? 80 : 68
                guard size >= fixed else { throw .truncated }
                if textAddress == nil, name(data, at: at + 8, is: "__TEXT") {
                    textAddress = segment64 ? try r.u64(at: at + 24) : UInt64(try r.u32(at: at + 24))
                }
                let sections = Int(try r.u32(at: at + (segment64 ? 64 : 48)))
                guard sections <= (size - fixed) / sectionSize else { throw .truncated }
                for s in 0..<sections {
                    let section = at + fixed + s * sectionSize
                    if name(data, at: section, is: "__debug_abbrev") {
                        let bytes = segment64 ? try r.u64(at: section + 40) : UInt64(try r.u32(at: section + 36))
                        let offset = UInt64(try r.u32(at: section + (segment64 ? 48 : 40)))
                        if bytes > 0, !DWARFAbbreviations.splitDWARFAttributes(in: data, offset: offset, size: bytes, into: &patches) {
                            patches.append(ELFDebugFile.Patch(offset: section, bytes: [UInt8](repeating: 0, count: 16)))
                        }
                    }
                    guard name(data, at: section, is: "__debug_info") else { continue }
                    let bytes = segment64 ? try r.u64(at: section + 40) : UInt64(try r.u32(at: section + 36))
                    let type = try r.u32(at: section + (segment64 ? 64 : 56)) & 0xff
                    // S_ZEROFILL (1), S_GB_ZEROFILL (12), S_THREAD_LOCAL_ZEROFILL (18): no contents.
                    if bytes > 0, type != 1, type != 12, type != 18 { hasDebugInfo = true }
                }
            default:
                break
            }
            at += size
        }
        guard let uuid else { throw .noUUID }
        return Slice(
            debugID: uuid, arch: archName(cpuType: cpuType, subtype: cpuSubtype), offset: 0, size: data.count,
            textAddress: textAddress ?? 0, hasDebugInfo: hasDebugInfo, hasSymbols: hasSymbols, lookupPatches: patches)
    }

    /// Whether the 16-byte, NUL-padded name at `offset` is `text`.
    private static func name(_ data: UnsafeRawBufferPointer, at offset: Int, is text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard offset >= 0, offset + 16 <= data.count, count <= 16 else { return false }
        return text.withUTF8Buffer { text in
            (0..<16).allSatisfy { i in data[offset + i] == (i < count ? text[i] : 0) }
        }
    }

    private static func uuidText(_ data: UnsafeRawBufferPointer, at offset: Int) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for i in 0..<16 {
            if i == 4 || i == 6 || i == 8 || i == 10 { text.append(UInt8(ascii: "-")) }
            let byte = data[offset + i]
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The name Apple's tools (and Sentry) give an architecture.
    public static func archName(cpuType: UInt32, subtype: UInt32) -> String {
        let sub = subtype & 0x00ff_ffff
        switch cpuType {
        case 0x0100_000c:  // CPU_TYPE_ARM64
            return sub == 2 ? "arm64e" : sub == 1 ? "arm64v8" : "arm64"
        case 0x0200_000c: return "arm64_32"
        case 0x0100_0007: return sub == 8 ? "x86_64h" : "x86_64"
        case 7: return "x86"
        case 12:
            let names: [UInt32: String] = [
                5: "armv4t", 6: "armv6", 7: "armv5", 9: "armv7", 10: "armv7f", 11: "armv7s", 12: "armv7k", 14: "armv6m",
                15: "armv7m", 16: "armv7em",
            ]
            return names[sub] ?? "arm"
        case 18: return "ppc"
        case 0x0100_0012: return "ppc64"
        default: return "cpu\(cpuType)"
        }
    }

    private struct Reader {
        let data: UnsafeRawBufferPointer
        let little: Bool

        func integer(at offset: Int, _ count: Int) throws(Error) -> UInt64 {
            guard offset >= 0, offset <= data.count - count else { throw .truncated }
            var value: UInt64 = 0
            for i in 0..<count {
                value = value << 8 | UInt64(data[little ? offset + count - 1 - i : offset + i])
            }
            return value
        }

        func u32(at offset: Int) throws(Error) -> UInt32 { UInt32(try integer(at: offset, 4)) }
        func u64(at offset: Int) throws(Error) -> UInt64 { try integer(at: offset, 8) }
    }
}
