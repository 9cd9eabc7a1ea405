import CCrashCapture
import Foundation

/// The crash-safe on-disk queue: one file per report (`<sequence>-<id>.report`, the
/// sequence zero-padded so names sort in arrival order), each written to a temporary file,
/// fsynced and atomically renamed, so a crash at any moment leaves whole reports or none.
///
/// Bounded in bytes like swift-otel's bounded deque, but it drops the *oldest* reports
/// when full (the newest say most about the current build) and counts what it dropped in a
/// small file beside them, so the count survives restarts until an upload carries it.
final class DiskQueue: @unchecked Sendable {
    /// One queued report file.
    struct Entry: Hashable, Sendable {
        var name: String
        var bytes: Int
    }

    let directory: URL
    let maxBytes: Int
    private let lock = NSLock()
    private var entries: [Entry] = []
    private var totalBytes = 0
    private var droppedCount = 0
    private var nextSequence: UInt64 = 0

    private static let suffix = ".report"
    private static let droppedFile = "dropped"

    /// Opens (creating) the queue in `directory`, removing temporary files a crash left.
    init(directory: URL, maxBytes: Int) throws {
        self.directory = directory
        self.maxBytes = max(maxBytes, 1)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        for name in names.sorted() {
            let path = directory.appendingPathComponent(name).path
            if name.hasSuffix(".tmp") {
                try? FileManager.default.removeItem(atPath: path)
            } else if name.hasSuffix(Self.suffix) {
                let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                entries.append(Entry(name: name, bytes: size))
                totalBytes += size
                if let sequence = UInt64(name.prefix { $0 != "-" }) { nextSequence = max(nextSequence, sequence + 1) }
            }
        }
        if let text = try? String(contentsOf: url(Self.droppedFile), encoding: .utf8) {
            droppedCount = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
    }

    /// Reports waiting.
    var count: Int { lock.withLock { entries.count } }
    /// Bytes waiting.
    var bytes: Int { lock.withLock { totalBytes } }
    /// Reports dropped for room and not yet reported to the server.
    var dropped: Int { lock.withLock { droppedCount } }

    /// Appends one encoded report durably, then drops the oldest reports while the queue
    /// is over its byte cap. Returns the number of reports now queued.
    @discardableResult
    func append(_ data: Data, id: UUID) throws -> Int {
        try lock.withLock {
            let name = String(format: "%020llu-", nextSequence) + id.uuidString.lowercased() + Self.suffix
            nextSequence += 1
            try write(data, to: name)
            entries.append(Entry(name: name, bytes: data.count))
            totalBytes += data.count
            var dropped = 0
            while totalBytes > maxBytes, !entries.isEmpty {
                let oldest = entries.removeFirst()
                totalBytes -= oldest.bytes
                try? FileManager.default.removeItem(at: url(oldest.name))
                dropped += 1
            }
            if dropped > 0 {
                droppedCount += dropped
                persistDropped()
            }
            return entries.count
        }
    }

    /// The oldest reports, at most `limit` of them and about `maxBytes` (at least one).
    func peek(limit: Int, maxBytes: Int = .max) -> [Entry] {
        lock.withLock {
            var batch: [Entry] = []
            var bytes = 0
            for entry in entries {
                if batch.count == limit { break }
                if !batch.isEmpty, bytes + entry.bytes > maxBytes { break }
                batch.append(entry)
                bytes += entry.bytes
            }
            return batch
        }
    }

    /// The stored bytes of an entry, or `nil` when it is gone.
    func read(_ entry: Entry) -> Data? { try? Data(contentsOf: url(entry.name)) }

    /// Deletes entries (after the server took them, or because they can never be sent).
    func remove(_ removed: some Sequence<Entry>) {
        lock.withLock {
            let names = Set(removed.map(\.name))
            guard !names.isEmpty else { return }
            for name in names { try? FileManager.default.removeItem(at: url(name)) }
            entries.removeAll { entry in
                guard names.contains(entry.name) else { return false }
                totalBytes -= entry.bytes
                return true
            }
        }
    }

    /// The server was told about `count` dropped reports.
    func acknowledgeDropped(_ count: Int) {
        lock.withLock {
            droppedCount = max(droppedCount - count, 0)
            persistDropped()
        }
    }

    private func url(_ name: String) -> URL { directory.appendingPathComponent(name) }

    private func write(_ data: Data, to name: String) throws {
        let error = data.withUnsafeBytes { bytes in
            ccrash_write_file_atomically(directory.path, url(name + ".tmp").path, url(name).path, bytes.baseAddress, bytes.count)
        }
        if error != 0 { throw POSIXError(POSIXErrorCode(rawValue: error) ?? .EIO) }
    }

    private func persistDropped() {
        try? write(Data("\(droppedCount)\n".utf8), to: Self.droppedFile)
    }
}

/// A small file written crash-safely (temporary file, fsync, rename).
func writeFileAtomically(_ data: Data, to url: URL) throws {
    let directory = url.deletingLastPathComponent()
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let error = data.withUnsafeBytes { bytes in
        ccrash_write_file_atomically(directory.path, url.path + ".tmp", url.path, bytes.baseAddress, bytes.count)
    }
    if error != 0 { throw POSIXError(POSIXErrorCode(rawValue: error) ?? .EIO) }
}
