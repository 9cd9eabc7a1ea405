import CrashCompression
import CrashDebugFiles
import Foundation
import NIOCore

/// Turns one uploaded file into the debug files it holds and stores each: an ELF file is one
/// (by GNU build id); a Mach-O file one per architecture (by `LC_UUID`, each architecture of
/// a fat file copied out to a thin file of its own, which is what the symbolizer reads); a
/// zip of a `.dSYM` bundle one per architecture of every Mach-O under
/// `*.dSYM/Contents/Resources/DWARF/`. Shared by the REST upload, Sentry's `difs/assemble`
/// and the command line.
///
/// A zip is hostile input like the rest: only its directory is read (``ZipDirectory``), at
/// most ``maxDWARFEntries`` entries are extracted, stored or deflate only, their declared
/// sizes together within the upload limit, each inflated in small steps into a file of its own
/// with the inflater capped at the declared size (a bomb stops there), and what comes out
/// must be that size.
struct DebugFileIntake<Store: DebugFileStore>: Sendable {
    let store: Store
    /// The upload limit (`CRASHGUARD_MAX_DEBUG_FILE_BYTES`): a zip's entries together stay within it.
    let maxBytes: Int
    let spoolDirectory: URL

    /// Most DWARF files one dSYM zip may hold.
    static var maxDWARFEntries: Int { 64 }
    /// Compressed bytes inflated per step: bounds what one step can produce (deflate expands
    /// at most about 1,032 times).
    static var inflateStepBytes: Int { 4096 }

    private enum Parsed: Sendable {
        case elf(ELFDebugFile)
        case macho(MachODebugFile)
        case zip(ZipDirectory)
    }

    /// Stores the debug files in `spool` for `project`. Throws ``DebugFileIntakeError`` for a
    /// file that is none of the accepted kinds or cannot be read, ``DebugFileQuotaError``
    /// past the quota.
    func store(project: Int64, name: String, spool: DebugFileSpool, quota: DebugFileQuota) async throws -> DebugFileUpload {
        let parsed: Parsed
        do {
            parsed = try await spool.withMapping { data throws -> Parsed in
                if ZipDirectory.hasMagic(data) { return .zip(try ZipDirectory(parsing: data)) }
                if MachODebugFile.hasMagic(data) { return .macho(try MachODebugFile(parsing: data)) }
                if data.count >= 4, data[0] == 0x7f, data[1] == 0x45, data[2] == 0x4c, data[3] == 0x46 {
                    return .elf(try ELFDebugFile(parsing: data))
                }
                throw DebugFileIntakeError("not a Mach-O, ELF or dSYM zip file")
            }
        } catch let error as ELFDebugFile.Error {
            throw DebugFileIntakeError("\(error)")
        } catch let error as MachODebugFile.Error {
            throw DebugFileIntakeError("\(error)")
        } catch let error as ZipDirectory.Error {
            throw DebugFileIntakeError("\(error)")
        }
        var entries: [DebugFileUploadEntry] = []
        switch parsed {
        case .elf(let elf):
            entries = [try await store.store(project: project, name: name, spool: spool, identity: .init(elf: elf), quota: quota)]
        case .macho(let file):
            entries = try await storeSlices(of: file, in: spool, project: project, name: name, quota: quota)
        case .zip(let directory):
            let dwarf = directory.entries.filter(\.isDSYMDWARF)
            guard !dwarf.isEmpty else {
                throw DebugFileIntakeError("the zip holds no dSYM (no file under *.dSYM/Contents/Resources/DWARF/)")
            }
            guard dwarf.count <= Self.maxDWARFEntries else {
                throw DebugFileIntakeError("the zip holds more than \(Self.maxDWARFEntries) dSYM DWARF files")
            }
            guard dwarf.reduce(0, { $0 + $1.uncompressedSize }) <= maxBytes else {
                throw DebugFileIntakeError("the zip's dSYM DWARF files are over \(maxBytes) bytes (CRASHGUARD_MAX_DEBUG_FILE_BYTES)")
            }
            for entry in dwarf {
                let out = try await extract(entry, from: spool)
                let file: MachODebugFile
                do {
                    file = try await out.withMapping { try MachODebugFile(parsing: $0) }
                } catch let error as MachODebugFile.Error {
                    throw DebugFileIntakeError("\(entry.name): \(error)")
                }
                let fileName = String(entry.name.split(separator: "/").last ?? "dSYM")
                entries += try await storeSlices(of: file, in: out, project: project, name: fileName, quota: quota)
            }
        }
        return DebugFileUpload(files: entries)
    }

    /// Stores each architecture of `file`: `spool` itself when it is one thin file, else a
    /// copy of each slice.
    private func storeSlices(
        of file: MachODebugFile, in spool: DebugFileSpool, project: Int64, name: String, quota: DebugFileQuota
    ) async throws -> [DebugFileUploadEntry] {
        var entries: [DebugFileUploadEntry] = []
        for slice in file.slices {
            var source = spool
            if slice.offset != 0 || slice.size != spool.size {
                source = try DebugFileSpool(in: spoolDirectory)
                try await spool.forEachChunk(offset: slice.offset, length: slice.size) { try await source.append($0) }
            }
            entries.append(try await store.store(project: project, name: name, spool: source, identity: .init(macho: slice), quota: quota))
        }
        return entries
    }

    /// The entry's bytes in a file of their own.
    private func extract(_ entry: ZipDirectory.Entry, from archive: DebugFileSpool) async throws -> DebugFileSpool {
        let out = try DebugFileSpool(in: spoolDirectory)
        switch entry.method {
        case 0:
            guard entry.compressedSize == entry.uncompressedSize else { throw DebugFileIntakeError("\(entry.name): sizes disagree") }
            try await archive.forEachChunk(offset: entry.dataOffset, length: entry.compressedSize) { try await out.append($0) }
        case 8:
            // Raw deflate, fed to the zlib-stream inflater behind a zlib header and ended
            // with the Adler-32 of what it produced.
            let inflater = try Inflater(format: .deflate, maxOutputBytes: entry.uncompressedSize)
            var adler = Adler32()
            var output = ByteBuffer()
            func feed(_ bytes: UnsafeRawBufferPointer) throws {
                try inflater.feed(bytes) { piece in
                    adler.update(piece)
                    output.writeBytes(piece)
                }
            }
            do {
                try [UInt8]([0x78, 0x01]).withUnsafeBytes { try feed($0) }
                try await archive.forEachChunk(offset: entry.dataOffset, length: entry.compressedSize) { chunk in
                    var rest = chunk
                    while rest.readableBytes > 0 {
                        let step = rest.readSlice(length: min(Self.inflateStepBytes, rest.readableBytes))!
                        try step.withUnsafeReadableBytes { try feed($0) }
                        if output.readableBytes > 0 {
                            try await out.append(output)
                            output.clear()
                        }
                    }
                }
                let check = adler.value.bigEndian
                try withUnsafeBytes(of: check) { try feed($0) }
                try inflater.end()
            } catch let error as CompressionError {
                throw DebugFileIntakeError("\(entry.name): \(error)")
            }
            if output.readableBytes > 0 { try await out.append(output) }
        default:
            throw DebugFileIntakeError("\(entry.name): zip compression method \(entry.method) (only stored and deflate)")
        }
        guard out.size == entry.uncompressedSize else {
            throw DebugFileIntakeError("\(entry.name): \(out.size) bytes where the zip says \(entry.uncompressedSize)")
        }
        return out
    }
}

/// Adler-32 (RFC 1950), for the trailer of the zlib stream a raw deflate entry is fed as.
private struct Adler32 {
    private var a: UInt32 = 1
    private var b: UInt32 = 0
    var value: UInt32 { b << 16 | a }

    mutating func update(_ bytes: UnsafeBufferPointer<UInt8>) {
        var index = 0
        while index < bytes.count {
            // 5552: the most bytes before the sums can overflow 32 bits (zlib's NMAX).
            let end = min(bytes.count, index + 5552)
            while index < end {
                a &+= UInt32(bytes[index])
                b &+= a
                index += 1
            }
            a %= 65521
            b %= 65521
        }
    }
}

/// A file that holds no debug file the server takes, or cannot be read: 400 with this text.
struct DebugFileIntakeError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
