/// The central directory of a zip archive (a zipped `.dSYM` bundle): each entry's name,
/// compression, sizes and where its data lies, checked against the bytes given. Nothing is
/// decompressed here; the caller inflates the entries it wants within its own limits and
/// compares what comes out with ``Entry/uncompressedSize``.
///
/// Bounded like the other readers: the end record is looked for only in the last 64 KiB +
/// 22 bytes, at most ``maxEntries`` entries, each inside the directory, each entry's data
/// inside the file. Zip64 archives (over 4 GiB or 65,535 entries) and encrypted entries are
/// refused: no dSYM within the server's upload limit needs them.
public struct ZipDirectory: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var name: String
        /// 0 stored, 8 deflate.
        public var method: UInt16
        public var crc32: UInt32
        public var compressedSize: Int
        public var uncompressedSize: Int
        /// Where the entry's (compressed) data starts in the archive.
        public var dataOffset: Int

        /// Whether the entry is a file directly in a `.dSYM` bundle's `Contents/Resources/DWARF/`.
        public var isDSYMDWARF: Bool {
            let parts = name.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count >= 5, let last = parts.last, !last.isEmpty, !parts.contains("..") else { return false }
            let tail = parts.suffix(5)
            let bundle = tail[tail.startIndex]
            return bundle.hasSuffix(".dSYM") && Array(tail.dropFirst().dropLast()) == ["Contents", "Resources", "DWARF"]
        }
    }

    public var entries: [Entry]

    /// Most entries an archive may have.
    public static let maxEntries = 65_535

    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        private enum Code: Equatable { case notZip, truncated, zip64, encrypted, tooManyEntries }
        private let code: Code
        public static let notZip = Error(code: .notZip)
        public static let truncated = Error(code: .truncated)
        public static let zip64 = Error(code: .zip64)
        public static let encrypted = Error(code: .encrypted)
        public static let tooManyEntries = Error(code: .tooManyEntries)
        public var description: String {
            switch code {
            case .notZip: "not a zip archive"
            case .truncated: "a truncated or malformed zip archive"
            case .zip64: "a zip64 archive (over 4 GiB or 65,535 entries) is not accepted"
            case .encrypted: "an encrypted zip entry"
            case .tooManyEntries: "more than \(ZipDirectory.maxEntries) zip entries"
            }
        }
    }

    /// Whether `data` starts like a zip archive (a local header, or the end record of an empty one).
    public static func hasMagic(_ data: UnsafeRawBufferPointer) -> Bool {
        data.count >= 4 && data[0] == 0x50 && data[1] == 0x4b
            && ((data[2] == 3 && data[3] == 4) || (data[2] == 5 && data[3] == 6))
    }

    public init(parsing bytes: [UInt8]) throws(Error) {
        let parsed = bytes.withUnsafeBytes { buffer in Result { () throws(Error) in try ZipDirectory(parsing: buffer) } }
        self = try parsed.get()
    }

    public init(parsing data: UnsafeRawBufferPointer) throws(Error) {
        guard Self.hasMagic(data) else { throw .notZip }
        func u16(_ at: Int) throws(Error) -> Int {
            guard at >= 0, at + 2 <= data.count else { throw .truncated }
            return Int(data[at]) | Int(data[at + 1]) << 8
        }
        func u32(_ at: Int) throws(Error) -> Int {
            guard at >= 0, at + 4 <= data.count else { throw .truncated }
            return Int(data[at]) | Int(data[at + 1]) << 8 | Int(data[at + 2]) << 16 | Int(data[at + 3]) << 24
        }
        guard data.count >= 22 else { throw .truncated }
        var end = -1
        var at = data.count - 22
        let lowest = max(0, data.count - 22 - 65_535)
        while at >= lowest {
            if data[at] == 0x50, data[at + 1] == 0x4b, data[at + 2] == 5, data[at + 3] == 6, try u16(at + 20) == data.count - at - 22 {
                end = at
                break
            }
            at -= 1
        }
        guard end >= 0 else { throw .truncated }
        let count = try u16(end + 10)
        let directorySize = try u32(end + 12)
        let directoryOffset = try u32(end + 16)
        if count == 0xffff || directorySize == 0xffff_ffff || directoryOffset == 0xffff_ffff { throw .zip64 }
        guard try u16(end + 4) == 0, try u16(end + 6) == 0, try u16(end + 8) == count else { throw .truncated }
        guard count <= Self.maxEntries else { throw .tooManyEntries }
        guard directoryOffset <= end, directorySize <= end - directoryOffset else { throw .truncated }
        let directoryEnd = directoryOffset + directorySize
        var entries: [Entry] = []
        var cursor = directoryOffset
        for _ in 0..<count {
            guard cursor + 46 <= directoryEnd, try u32(cursor) == 0x0201_4b50 else { throw .truncated }
            let flags = try u16(cursor + 8)
            let method = try u16(cursor + 10)
            let crc = try u32(cursor + 16)
            let compressed = try u32(cursor + 20)
            let uncompressed = try u32(cursor + 24)
            let nameLength = try u16(cursor + 28)
            let extraLength = try u16(cursor + 30)
            let commentLength = try u16(cursor + 32)
            let local = try u32(cursor + 42)
            let next = cursor + 46 + nameLength + extraLength + commentLength
            guard next <= directoryEnd else { throw .truncated }
            if compressed == 0xffff_ffff || uncompressed == 0xffff_ffff || local == 0xffff_ffff { throw .zip64 }
            if flags & 1 != 0 { throw .encrypted }
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: data[cursor + 46..<cursor + 46 + nameLength]), as: UTF8.self)
            // The local header: its own name and extra lengths place the data.
            guard local <= directoryOffset, try u32(local) == 0x0403_4b50 else { throw .truncated }
            let dataOffset = local + 30 + (try u16(local + 26)) + (try u16(local + 28))
            guard dataOffset <= directoryOffset, compressed <= directoryOffset - dataOffset else { throw .truncated }
            entries.append(
                Entry(
                    name: name, method: UInt16(method), crc32: UInt32(crc), compressedSize: compressed,
                    uncompressedSize: uncompressed, dataOffset: dataOffset))
            cursor = next
        }
        self.entries = entries
    }
}
