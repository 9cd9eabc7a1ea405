import CrashDebugFiles
import Crypto
import Foundation
import NIOCore
import NIOPosix

/// A debug file on local disk: an upload as it arrives, a file the command line stores, or a
/// copy for the symbolizer as it is read back from the database. Bytes are appended as they
/// come and hashed on the way; the file is read back in chunks and its headers parsed from
/// a mapping, so no debug file is ever held in memory whole. Every blocking call (write,
/// read, mapping, parsing) runs on NIO's blocking thread pool, never on a Swift
/// concurrency thread.
///
/// Used by one task at a time. The file is removed when the spool ends unless ``keep(at:)``
/// moved it into place.
final class DebugFileSpool: @unchecked Sendable {
    /// The file's path.
    private(set) var path: String
    private let descriptor: Int32
    private var hasher = SHA256()
    /// The SHA-1 too: Sentry's chunk-upload protocol names files by it.
    private var sha1Hasher = Insecure.SHA1()
    private var kept = false
    /// Bytes appended so far.
    private(set) var size = 0

    /// The size of the chunks a file is read back in (and stored in the database).
    static let chunkBytes = 1 << 20

    /// `$TMPDIR/crashguard-uploads`: uploads as they arrive (each removed when its request ends).
    static var uploadDirectory: URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-uploads", isDirectory: true)
    }

    /// A new, empty file in `directory` (created if missing), readable only by the server.
    init(in directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent(".\(UUID().uuidString).tmp").path
        descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw DebugFileSpoolError("cannot create \(path): errno \(errno)") }
    }

    deinit {
        close(descriptor)
        if !kept { unlink(path) }
    }

    /// Appends `bytes` (hashing them).
    func append(_ bytes: ByteBuffer) async throws {
        try await NIOThreadPool.singleton.runIfActive { try self.appendBlocking(bytes) }
    }

    private func appendBlocking(_ bytes: ByteBuffer) throws {
        try bytes.withUnsafeReadableBytes { buffer in
            hasher.update(bufferPointer: buffer)
            sha1Hasher.update(bufferPointer: buffer)
            var done = 0
            while done < buffer.count {
                let written = pwrite(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(size + done))
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { throw DebugFileSpoolError("cannot write \(path): errno \(errno)") }
                done += written
            }
        }
        size += bytes.readableBytes
    }

    /// Appends the file at `source`, in chunks.
    func append(contentsOf source: String) async throws {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw DebugFileSpoolError("cannot open \(source): errno \(errno)") }
        defer { close(input) }
        while true {
            let chunk = try await NIOThreadPool.singleton.runIfActive { () throws -> ByteBuffer? in
                var buffer = ByteBuffer()
                let count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.chunkBytes) { target in
                    let count = read(input, target.baseAddress, target.count)
                    guard count >= 0 else { throw DebugFileSpoolError("cannot read \(source): errno \(errno)") }
                    return count
                }
                guard count > 0 else { return nil }
                try self.appendBlocking(buffer)
                return buffer
            }
            guard chunk != nil else { return }
        }
    }

    /// The SHA-256 of everything appended, lowercase hex.
    var sha256: String { hasher.finalize().map { String(format: "%02x", $0) }.joined() }

    /// The SHA-1 of everything appended, lowercase hex.
    var sha1: String { sha1Hasher.finalize().map { String(format: "%02x", $0) }.joined() }

    /// Calls `body` with the file mapped (empty when the file is), on NIO's blocking pool.
    func withMapping<T: Sendable>(_ body: @escaping @Sendable (UnsafeRawBufferPointer) throws -> T) async throws -> T {
        let descriptor = self.descriptor
        let size = self.size
        return try await NIOThreadPool.singleton.runIfActive {
            guard size > 0 else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
            let mapping = mmap(nil, size, PROT_READ, MAP_PRIVATE, descriptor, 0)
            guard let mapping, mapping != UnsafeMutableRawPointer(bitPattern: -1) else {
                throw DebugFileSpoolError("cannot map the file: errno \(errno)")
            }
            defer { munmap(mapping, size) }
            return try body(UnsafeRawBufferPointer(start: mapping, count: size))
        }
    }

    /// Calls `body` with the bytes `offset..<offset + length` of the file, in chunks of at
    /// most ``chunkBytes``.
    func forEachChunk(offset: Int, length: Int, _ body: (ByteBuffer) async throws -> Void) async throws {
        precondition(offset >= 0 && length >= 0 && offset + length <= size)
        var done = 0
        while done < length {
            let start = offset + done
            let count = min(Self.chunkBytes, length - done)
            let chunk = try await NIOThreadPool.singleton.runIfActive { () throws -> ByteBuffer in
                var buffer = ByteBuffer()
                var read = 0
                while read < count {
                    read += try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count - read) { target in
                        let got = pread(self.descriptor, target.baseAddress, count - read, off_t(start + read))
                        if got < 0, errno == EINTR { return 0 }
                        guard got > 0 else { throw DebugFileSpoolError("cannot read \(self.path): errno \(errno)") }
                        return got
                    }
                }
                return buffer
            }
            try await body(chunk)
            done += count
        }
    }

    /// The lookups the file still names (``ELFDebugFile/remainingLookups(in:)``, or a thin
    /// Mach-O image's ``MachODebugFile/Slice/lookupPatches``); nil when its headers cannot be read.
    func remainingLookups() async throws -> [ELFDebugFile.Patch]? {
        let descriptor = self.descriptor
        let size = self.size
        return try await NIOThreadPool.singleton.runIfActive {
            guard size > 0 else { return nil }
            let mapping = mmap(nil, size, PROT_READ, MAP_PRIVATE, descriptor, 0)
            guard let mapping, mapping != UnsafeMutableRawPointer(bitPattern: -1) else {
                throw DebugFileSpoolError("cannot map the file: errno \(errno)")
            }
            defer { munmap(mapping, size) }
            let data = UnsafeRawBufferPointer(start: mapping, count: size)
            if MachODebugFile.hasMagic(data) {
                guard let file = try? MachODebugFile(parsing: data), file.slices.count == 1 else { return nil }
                return file.slices[0].lookupPatches
            }
            return try? ELFDebugFile.remainingLookups(in: data)
        }
    }

    /// Overwrites the bytes each patch names (the copy the symbolizer reads).
    func apply(_ patches: [ELFDebugFile.Patch]) async throws {
        try await NIOThreadPool.singleton.runIfActive {
            for patch in patches where patch.offset >= 0 && patch.offset + patch.bytes.count <= self.size {
                let written = patch.bytes.withUnsafeBytes { pwrite(self.descriptor, $0.baseAddress, $0.count, off_t(patch.offset)) }
                guard written == patch.bytes.count else { throw DebugFileSpoolError("cannot write \(self.path): errno \(errno)") }
            }
        }
    }

    /// Calls `body` with each chunk of the file, in order (at most ``chunkBytes`` each).
    func forEachChunk(_ body: (ByteBuffer) async throws -> Void) async throws {
        var offset = 0
        while offset < size {
            let start = offset
            let length = min(Self.chunkBytes, size - offset)
            let chunk = try await NIOThreadPool.singleton.runIfActive { () throws -> ByteBuffer in
                var buffer = ByteBuffer()
                var done = 0
                while done < length {
                    let count = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length - done) { target in
                        let count = pread(self.descriptor, target.baseAddress, length - done, off_t(start + done))
                        if count < 0, errno == EINTR { return 0 }
                        guard count > 0 else { throw DebugFileSpoolError("cannot read \(self.path): errno \(errno)") }
                        return count
                    }
                    done += count
                }
                return buffer
            }
            try await body(chunk)
            offset += length
        }
    }

    /// Moves the file to `destination` (atomically: readers see the whole file or none);
    /// it then outlives the spool.
    func keep(at destination: String) throws {
        guard rename(path, destination) == 0 else { throw DebugFileSpoolError("cannot move \(path) to \(destination): errno \(errno)") }
        path = destination
        kept = true
    }
}

/// A local file that could not be written or read.
struct DebugFileSpoolError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
