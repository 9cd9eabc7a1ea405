import CrashDebugFiles
import Foundation
import Logging
import NIOPosix

/// The debug files one server's symbolizer reads: copies written from the database on first
/// use, in one directory (`<key>-<sha256 prefix>.elf` or `.macho`), each moved into place
/// whole (concurrent readers, and replicas sharing the directory, never see half a file).
///
/// An ELF copy is the stored file with its ``ELFDebugFile/lookupPatches`` applied: it names no
/// other file (no debug link, no split-DWARF `.dwo` path), so `llvm-symbolizer` reads nothing
/// but what the server wrote for it. A Mach-O copy is one thin image (the intake stores each
/// architecture of a fat file on its own) with its ``MachODebugFile/Slice/lookupPatches``
/// applied (split-DWARF paths in its `__debug_abbrev`); the symbolizer's other Mach-O lookup,
/// a `<file>.dSYM` bundle beside it, can only name this directory, where the server writes
/// nothing of that name. Its SHA-256 before the patches must be the stored one.
///
/// The directory is bounded: after each new copy, files not used for ``maxAge`` go, then the
/// least recently used (by modification time, set again at every use) until the whole is
/// within `maxBytes`; temporary files left by a crash go after an hour.
final class DebugFileCache: Sendable {
    let directory: URL
    let maxBytes: Int64
    let logger: Logger

    /// How long a copy nobody used stays.
    static let maxAge: TimeInterval = 7 * 24 * 3600

    init(directory: URL, maxBytes: Int64, logger: Logger) {
        self.directory = directory
        self.maxBytes = maxBytes
        self.logger = logger
    }

    /// The symbolizer's copy of a stored debug file, written from the database when missing.
    func file(project: Int64, info: DebugFileInfo, store: some DebugFileStore) async throws -> URL {
        let url = directory.appendingPathComponent("\(info.buildId)-\(info.sha256.prefix(16)).\(info.kind == "macho" ? "macho" : "elf")")
        if Self.touch(url.path) { return url }
        let spool = try DebugFileSpool(in: directory)
        let found = try await store.chunks(project: project, buildID: info.buildId, sha256: info.sha256) { chunk in
            try await spool.append(chunk)
        }
        guard found, spool.sha256 == info.sha256 else {
            throw SymbolizerError.unavailable("debug file \(info.buildId) was replaced while reading")
        }
        try await install(spool, at: url)
        return url
    }

    /// A copy of the local file at `path` (tests, and files that never went to the database).
    func install(copying path: String) async throws -> URL {
        let spool = try DebugFileSpool(in: directory)
        try await spool.append(contentsOf: path)
        let isMachO = try await spool.withMapping { MachODebugFile.hasMagic($0) }
        let url = directory.appendingPathComponent("\(UUID().uuidString)-\(spool.sha256.prefix(16)).\(isMachO ? "macho" : "elf")")
        try await install(spool, at: url)
        return url
    }

    /// Makes `spool` the copy at `url`: parsed, patched, moved into place; then the cache is pruned.
    private func install(_ spool: DebugFileSpool, at url: URL) async throws {
        let (key, patches) = try await spool.withMapping { data throws -> (String, [ELFDebugFile.Patch]) in
            guard MachODebugFile.hasMagic(data) else {
                let elf = try ELFDebugFile(parsing: data)
                return (elf.buildID, elf.lookupPatches)
            }
            // One architecture: what the symbolizer is given must be the image the key names.
            let file = try MachODebugFile(parsing: data)
            guard file.slices.count == 1, let slice = file.slices.first else {
                throw SymbolizerError.unavailable("a debug file copy must be one thin Mach-O image")
            }
            return (slice.debugID, slice.lookupPatches)
        }
        try await spool.apply(patches)
        // Read again as patched: a file whose patches overlap its own headers could name
        // something still; it is then never given to the symbolizer.
        guard try await spool.remainingLookups() == [] else {
            throw SymbolizerError.unavailable("debug file \(key) still names other files once patched")
        }
        try spool.keep(at: url.path)
        let removed = try await NIOThreadPool.singleton.runIfActive { self.prune(keeping: url.lastPathComponent) }
        if removed > 0 { logger.debug("debug file cache pruned", metadata: ["files.removed": "\(removed)"]) }
    }

    /// Removes what the bounds say must go; the number of files removed.
    func prune(keeping kept: String, now: Date = Date()) -> Int {
        let keys: [URLResourceKey] = [.fileSizeKey, .contentModificationDateKey, .isRegularFileKey]
        guard
            let entries = try? FileManager.default.contentsOfDirectory(
                at: directory, includingPropertiesForKeys: keys, options: [])
        else { return 0 }
        var files: [(name: String, size: Int64, used: Date)] = []
        var removed = 0
        for entry in entries {
            guard let values = try? entry.resourceValues(forKeys: Set(keys)), values.isRegularFile == true else { continue }
            let used = values.contentModificationDate ?? .distantPast
            let name = entry.lastPathComponent
            let age = now.timeIntervalSince(used)
            let stale = name.hasSuffix(".tmp") ? age > 3600 : age > Self.maxAge
            if name != kept, stale, unlink(entry.path) == 0 {
                removed += 1
                continue
            }
            if !name.hasSuffix(".tmp") { files.append((name, Int64(values.fileSize ?? 0), used)) }
        }
        var total = files.reduce(0) { $0 + $1.size }
        for file in files.sorted(by: { $0.used < $1.used }) where total > maxBytes && file.name != kept {
            if unlink(directory.appendingPathComponent(file.name).path) == 0 {
                total -= file.size
                removed += 1
            }
        }
        return removed
    }

    /// Marks the file at `path` used now; false when there is none.
    static func touch(_ path: String) -> Bool {
        utimensat(AT_FDCWD, path, nil, 0) == 0
    }
}
