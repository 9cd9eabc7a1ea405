import Foundation

/// A 64-bit little-endian ELF file made byte by byte: hostile header counts, note regions and
/// section tables that no linker writes.
struct CraftedELF {
    struct Header {
        var type: UInt32
        var offset: UInt64
        var size: UInt64
        var align: UInt64 = 4
        /// Section headers: `sh_info` and `sh_link` (section 0 carries the large counts).
        var info: UInt32 = 0
        var link: UInt32 = 0
        var name: UInt32 = 0
    }

    var bytes = [UInt8](repeating: 0, count: 64)
    var programHeaders: [Header] = []
    var sectionHeaders: [Header] = []
    /// `e_phnum`/`e_shnum` as written, when not the count of headers given.
    var phnumField: UInt16?
    var shnumField: UInt16?
    var shstrndxField: UInt16 = 0

    /// Appends `data` 8-aligned; its offset.
    @discardableResult
    mutating func append(_ data: [UInt8]) -> UInt64 {
        while bytes.count % 8 != 0 { bytes.append(0) }
        let offset = UInt64(bytes.count)
        bytes += data
        return offset
    }

    /// One note: 4-byte aligned name and descriptor.
    static func note(
        name: String = "GNU\0", type: UInt32, descriptor: [UInt8], nameSize: UInt32? = nil, descSize: UInt32? = nil
    )
        -> [UInt8]
    {
        func pad(_ b: [UInt8]) -> [UInt8] { b + [UInt8](repeating: 0, count: (4 - b.count % 4) % 4) }
        let name = Array(name.utf8)
        return le32(nameSize ?? UInt32(name.count)) + le32(descSize ?? UInt32(descriptor.count)) + le32(type) + pad(name) + pad(descriptor)
    }

    static func buildIDNote(_ id: [UInt8]) -> [UInt8] { note(type: 3, descriptor: id) }

    static func le16(_ v: UInt16) -> [UInt8] { withUnsafeBytes(of: v.littleEndian, Array.init) }
    static func le32(_ v: UInt32) -> [UInt8] { withUnsafeBytes(of: v.littleEndian, Array.init) }
    static func le64(_ v: UInt64) -> [UInt8] { withUnsafeBytes(of: v.littleEndian, Array.init) }

    /// The file: header, appended data, program headers, section headers.
    func build() -> [UInt8] {
        var out = bytes
        while out.count % 8 != 0 { out.append(0) }
        let phoff = programHeaders.isEmpty ? 0 : UInt64(out.count)
        for h in programHeaders {
            out += Self.le32(h.type) + Self.le32(4) + Self.le64(h.offset) + Self.le64(0x1000) + Self.le64(0x1000)
            out += Self.le64(h.size) + Self.le64(h.size) + Self.le64(h.align)
        }
        let shoff = sectionHeaders.isEmpty ? 0 : UInt64(out.count)
        for h in sectionHeaders {
            out += Self.le32(h.name) + Self.le32(h.type) + Self.le64(0) + Self.le64(0) + Self.le64(h.offset) + Self.le64(h.size)
            out += Self.le32(h.link) + Self.le32(h.info) + Self.le64(h.align) + Self.le64(0)
        }
        var header: [UInt8] = [0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0] + [UInt8](repeating: 0, count: 8)
        header += Self.le16(3) + Self.le16(62) + Self.le32(1) + Self.le64(0) + Self.le64(phoff) + Self.le64(shoff) + Self.le32(0)
        header += Self.le16(64) + Self.le16(56) + Self.le16(phnumField ?? UInt16(programHeaders.count))
        header += Self.le16(64) + Self.le16(shnumField ?? UInt16(sectionHeaders.count)) + Self.le16(shstrndxField)
        out.replaceSubrange(0..<64, with: header)
        return out
    }

    /// A well-formed file with one note segment holding `id` as its build id.
    static func valid(buildID id: [UInt8] = Array(0..<20), symbols: Bool = false, padding: Int = 0) -> [UInt8] {
        var elf = CraftedELF()
        let note = buildIDNote(id)
        let at = elf.append(note)
        elf.programHeaders = [Header(type: 4, offset: at, size: UInt64(note.count))]
        if symbols {
            let symtab = elf.append([UInt8](repeating: 0, count: 48))
            elf.sectionHeaders = [Header(type: 0, offset: 0, size: 0), Header(type: 2, offset: symtab, size: 48)]
        }
        if padding > 0 { elf.append([UInt8](repeating: 0, count: padding)) }
        return elf.build()
    }
}
