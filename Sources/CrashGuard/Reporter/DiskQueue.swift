import CCrashCapture
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The crash-safe on-disk queue: one file per report (`<sequence>-<id>.report`, the
/// sequence zero-padded so names sort in arrival order) or session update
/// (`<sequence>-<id>.session`), each written to a temporary file and atomically renamed, so a
/// crash at any moment leaves whole entries or none.
///
/// **Two stores.** Guard reports live in the directory itself; fatal reports and session
/// updates (``Store/kept``) in its `kept/` folder, which eviction never touches. The writer
/// fsyncs only what is durable (fatal reports, final session updates): a crash of the app
/// keeps every renamed file (the kernel has it), only a power loss can lose an unsynced
/// one, and ``close()`` fsyncs those at shutdown.
///
/// **One queue per directory.** ``open(directory:maxBytes:)`` hands every caller in this
/// process the same instance for a directory, and the instance holds an exclusive `flock`
/// on `<directory>/lock`, so a second process (or a stale instance) can never write, evict
/// or upload the same files: it gets ``QueueError/inUse``.
///
/// **Off the caller's thread.** ``append(_:id:durable:)`` hands the encoded report to the
/// queue's writer thread through a bounded buffer (``maxPending`` reports) and returns; the
/// writer writes each file (fsyncing the durable ones and their folder). A full
/// buffer drops the report and counts it (a guard firing in a loop must never block the
/// main thread). ``sync()`` waits until everything handed over is on disk (`flush` calls
/// it first); a `durable` append (fatal reports) waits for its own write.
///
/// **Bounded** in bytes: when both stores together are over ``maxBytes`` the *oldest guard
/// reports* are dropped and counted, except reports leased to an upload in flight
/// (``lease(limit:maxBytes:)``); kept entries are never evicted (the kept store alone is
/// capped at ``maxKeptEntries``: beyond that a new kept entry is dropped and counted). The count is kept in `dropped` beside the reports. Eviction renames the victims
/// to `.evicted`, records their names with the new count, then deletes them, so a crash at
/// any point neither loses nor double-counts a drop.
///
/// **Dead letters.** A report the server keeps failing on (see ``Uploader``) is moved to
/// `dead/` (the newest ``maxDeadLetters`` kept for inspection) and counted.
final class DiskQueue: @unchecked Sendable {
    /// One queued report file.
    struct Entry: Hashable, Sendable {
        /// The file's path relative to the queue directory (`kept/…` for the kept store).
        var name: String
        var bytes: Int

        var store: Store { name.hasPrefix(DiskQueue.keptFolder + "/") ? .kept : .evictable }
        var payload: Payload { name.hasSuffix(DiskQueue.sessionSuffix) ? .session : .report }
    }

    /// Where an entry lives: ``evictable`` guard reports, or the ``kept`` store of fatal
    /// reports and session updates that eviction never touches.
    enum Store: Sendable { case evictable, kept }

    /// What an entry holds, which decides the endpoint it is uploaded to.
    enum Payload: Sendable { case report, session }

    /// Why a queue could not be opened.
    struct QueueError: Error, CustomStringConvertible {
        private enum Code { case inUse, lock }
        private let code: Code
        let path: String
        let errno: Int32

        static func inUse(_ path: String) -> QueueError { QueueError(code: .inUse, path: path, errno: EWOULDBLOCK) }
        static func lock(_ path: String, _ errno: Int32) -> QueueError { QueueError(code: .lock, path: path, errno: errno) }

        var description: String {
            switch code {
            case .inUse: "the queue directory \(path) is in use by another process"
            case .lock: "cannot lock the queue directory \(path): errno \(errno)"
            }
        }
    }

    let directory: URL
    /// Reports handed over but not yet written, at most.
    let maxPending: Int
    static let maxDeadLetters = 20
    /// Most entries the kept store holds (a crash loop offline for hundreds of launches).
    static let maxKeptEntries = 1000
    static let keptFolder = "kept"
    static let sessionSuffix = ".session"

    private let condition = NSCondition()
    private var maxBytesValue: Int
    private var entries: [Entry] = []
    private var leased: Set<String> = []
    private var totalBytes = 0
    private var droppedCount = 0
    private var deadCount = 0
    private var nextSequence: UInt64 = 0
    private var pending: [(sequence: UInt64, name: String, data: Data, durable: Bool)] = []
    /// Files renamed into place without fsync, synced by ``close()``.
    private var unsynced: Set<String> = []
    /// Every sequence below this one is written (or was dropped).
    private var writtenBelow: UInt64 = 0
    private var closed = false
    private var lockDescriptor: Int32 = -1
    /// Tests: called between eviction's steps (`renamed`, `counted`).
    nonisolated(unsafe) static var evictionHook: ((String) -> Void)?
    /// Tests: called with the path of each file or folder the queue fsyncs.
    nonisolated(unsafe) static var fsyncHook: (@Sendable (String) -> Void)?

    private static let suffix = ".report"
    private static let droppedFile = "dropped"
    private static let deadFile = "dead-lettered"
    /// Open queues by directory, with how many users each has.
    private static let registry = LockedBox<[String: (queue: DiskQueue, users: Int)]>([:])

    /// The queue for `directory`: this process's open instance (with `maxBytes` updated),
    /// or a new one that locks the directory, removes temporary files a crash left and
    /// finishes an interrupted eviction. Each call is balanced by one ``relinquish()``.
    static func open(directory: URL, maxBytes: Int, maxPending: Int = 1024) throws -> DiskQueue {
        let key = directory.standardizedFileURL.path
        return try registry.withLock { queues in
            if let open = queues[key] {
                open.queue.maxBytes = maxBytes
                queues[key] = (open.queue, open.users + 1)
                return open.queue
            }
            let queue = try DiskQueue(directory: directory, maxBytes: maxBytes, maxPending: maxPending)
            queues[key] = (queue, 1)
            return queue
        }
    }

    /// One user is done with the queue; the last one closes it (see ``close()``).
    func relinquish() {
        let key = directory.standardizedFileURL.path
        let last = Self.registry.withLock { queues -> Bool in
            guard let open = queues[key], open.queue === self else { return false }
            if open.users > 1 {
                queues[key] = (self, open.users - 1)
                return false
            }
            queues[key] = nil
            return true
        }
        if last { close() }
    }

    private init(directory: URL, maxBytes: Int, maxPending: Int) throws {
        self.directory = directory
        self.maxBytesValue = max(maxBytes, 1)
        self.maxPending = max(maxPending, 1)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        lockDescriptor = posixOpen(directory.appendingPathComponent("lock").path)
        if lockDescriptor < 0 { throw QueueError.lock(directory.path, errno) }
        if flock(lockDescriptor, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            posixClose(lockDescriptor)
            throw error == EWOULDBLOCK ? QueueError.inUse(directory.path) : QueueError.lock(directory.path, error)
        }

        var counted: Set<String> = []
        if let text = try? String(contentsOf: url(Self.droppedFile), encoding: .utf8) {
            let lines = text.split(separator: "\n")
            droppedCount = lines.first.flatMap { Int($0) } ?? 0
            counted = Set(lines.dropFirst().map(String.init))
        }
        if let text = try? String(contentsOf: url(Self.deadFile), encoding: .utf8) {
            deadCount = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
        var evicted = false
        try FileManager.default.createDirectory(at: url(Self.keptFolder), withIntermediateDirectories: true)
        let names =
            try FileManager.default.contentsOfDirectory(atPath: directory.path)
            + (try FileManager.default.contentsOfDirectory(atPath: url(Self.keptFolder).path)).map { Self.keptFolder + "/" + $0 }
        // Arrival order across both stores: by sequence, the file name's first part.
        for name in names.sorted(by: { ($0.split(separator: "/").last ?? "") < ($1.split(separator: "/").last ?? "") }) {
            let path = directory.appendingPathComponent(name).path
            if name.hasSuffix(".tmp") {
                try? FileManager.default.removeItem(atPath: path)
            } else if name.hasSuffix(".evicted") {
                // An eviction a crash interrupted: counted already when its name was recorded.
                if !counted.contains(name) { droppedCount += 1 }
                try? FileManager.default.removeItem(atPath: path)
                evicted = true
            } else if name.hasSuffix(Self.suffix) || name.hasSuffix(Self.sessionSuffix) {
                let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                entries.append(Entry(name: name, bytes: size))
                totalBytes += size
                let file = name.split(separator: "/").last ?? ""
                if let sequence = UInt64(file.prefix { $0 != "-" }) { nextSequence = max(nextSequence, sequence + 1) }
            }
        }
        writtenBelow = nextSequence
        if evicted || !counted.isEmpty { persistDropped(names: []) }
        // The thread keeps the queue alive until ``close()``.
        let thread = Thread { self.writerLoop() }
        thread.name = "CrashGuard.queue"
        thread.start()
    }

    deinit {
        if lockDescriptor >= 0 { posixClose(lockDescriptor) }
    }

    var maxBytes: Int {
        get { condition.withLock { maxBytesValue } }
        set { condition.withLock { maxBytesValue = max(newValue, 1) } }
    }

    /// Reports waiting (written or still being written).
    var count: Int { condition.withLock { entries.count + pending.count } }
    /// Bytes waiting on disk.
    var bytes: Int { condition.withLock { totalBytes } }
    /// Reports dropped (queue full or hand-off full) and not yet reported to the server.
    var dropped: Int { condition.withLock { droppedCount } }
    /// Reports given up on after the retry cap, not yet reported to the server.
    var deadLettered: Int { condition.withLock { deadCount } }
    var isClosed: Bool { condition.withLock { closed } }
    /// Reports leased to uploads in flight.
    var leasedCount: Int { condition.withLock { leased.count } }

    /// Hands one encoded entry to the writer thread. Returns `false` when it was dropped
    /// (hand-off buffer or kept store full, or the queue closed). `durable`: fsynced, and
    /// returns only once it is on disk.
    @discardableResult
    func append(
        _ data: Data, id: UUID, durable: Bool = false, store: Store = .evictable, payload: Payload = .report
    ) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return false }
        let keptFull =
            store == .kept
            && entries.count(where: { $0.store == .kept }) + pending.count(where: { $0.name.hasPrefix(Self.keptFolder) })
                >= Self.maxKeptEntries
        if pending.count >= maxPending || keptFull {
            droppedCount += 1
            return false
        }
        let sequence = nextSequence
        nextSequence += 1
        let file =
            String(format: "%020llu-", sequence) + id.uuidString.lowercased()
            + (payload == .session ? Self.sessionSuffix : Self.suffix)
        let name = store == .kept ? Self.keptFolder + "/" + file : file
        pending.append((sequence, name, data, durable))
        condition.broadcast()
        if durable {
            while writtenBelow <= sequence, !closed { condition.wait() }
        }
        return true
    }

    /// Waits until everything handed over so far is on disk.
    func sync() {
        condition.lock()
        defer { condition.unlock() }
        let target = nextSequence
        while writtenBelow < target, !closed { condition.wait() }
    }

    /// Shutdown: waits for the writer, then fsyncs what it wrote without fsync (guard
    /// reports, first session updates) and the folders, so a power loss after a clean exit
    /// loses nothing.
    func syncToDisk() {
        sync()
        condition.withLock {
            guard !unsynced.isEmpty else { return }
            for name in unsynced { fsyncPath(url(name).path) }
            fsyncPath(directory.path)
            fsyncPath(url(Self.keptFolder).path)
            unsynced = []
        }
    }

    /// ``sync()`` from async code, waiting on a Dispatch thread rather than blocking one of
    /// the concurrency pool's few threads.
    func syncOffPool() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                self.sync()
                done.resume()
            }
        }
    }

    /// Leases the oldest entries not already leased, the kept store's first, all of one
    /// ``Payload`` (one upload goes to one endpoint), at most `limit` of them and about
    /// `maxBytes` (at least one): they are not handed out again, nor evicted, until
    /// ``remove(_:)``, ``release(_:)`` or ``deadLetter(_:)``.
    func lease(limit: Int, maxBytes: Int = .max) -> [Entry] {
        condition.withLock {
            var batch: [Entry] = []
            var bytes = 0
            let candidates =
                entries.filter { $0.store == .kept && !leased.contains($0.name) }
                + entries.filter { $0.store == .evictable && !leased.contains($0.name) }
            let payload = candidates.first?.payload
            for entry in candidates where entry.payload == payload {
                if batch.count == limit { break }
                if !batch.isEmpty, bytes + entry.bytes > maxBytes { break }
                batch.append(entry)
                bytes += entry.bytes
            }
            for entry in batch { leased.insert(entry.name) }
            return batch
        }
    }

    /// The oldest entries holding `payload`, once everything handed over is written (not
    /// leasing them).
    func peek(limit: Int, payload: Payload = .report) -> [Entry] {
        sync()
        return condition.withLock { Array(entries.lazy.filter { $0.payload == payload }.prefix(limit)) }
    }

    /// Gives leased reports back (the upload failed; they are sent again later).
    func release(_ released: some Sequence<Entry>) {
        condition.withLock { for entry in released { leased.remove(entry.name) } }
    }

    /// The stored bytes of an entry, or `nil` when it is gone.
    func read(_ entry: Entry) -> Data? { try? Data(contentsOf: url(entry.name)) }

    /// Deletes entries (after the server took them, or because they can never be sent).
    func remove(_ removed: some Sequence<Entry>) {
        condition.withLock {
            let names = Set(removed.map(\.name))
            guard !names.isEmpty else { return }
            for name in names { try? FileManager.default.removeItem(at: url(name)) }
            forgetLocked(names)
        }
    }

    /// Moves entries the server kept failing on to `dead/` and counts them.
    func deadLetter(_ failed: some Sequence<Entry>) {
        condition.withLock {
            let names = Set(failed.map(\.name))
            guard !names.isEmpty else { return }
            let dead = directory.appendingPathComponent("dead", isDirectory: true)
            try? FileManager.default.createDirectory(at: dead, withIntermediateDirectories: true)
            for name in names {
                let file = String(name.split(separator: "/").last ?? "")
                if rename(url(name).path, dead.appendingPathComponent(file).path) != 0 {
                    try? FileManager.default.removeItem(at: url(name))
                }
            }
            let kept = ((try? FileManager.default.contentsOfDirectory(atPath: dead.path)) ?? []).sorted()
            for name in kept.dropLast(Self.maxDeadLetters) { try? FileManager.default.removeItem(at: dead.appendingPathComponent(name)) }
            forgetLocked(names)
            deadCount += names.count
            try? writeFileAtomically(Data("\(deadCount)\n".utf8), to: url(Self.deadFile))
        }
    }

    /// The server was told about `count` dropped reports.
    func acknowledgeDropped(_ count: Int) {
        condition.withLock {
            droppedCount = max(droppedCount - count, 0)
            persistDropped(names: [])
        }
    }

    /// The server was told about `count` dead-lettered reports.
    func acknowledgeDeadLettered(_ count: Int) {
        condition.withLock {
            deadCount = max(deadCount - count, 0)
            try? writeFileAtomically(Data("\(deadCount)\n".utf8), to: url(Self.deadFile))
        }
    }

    /// Writes what is pending, stops the writer thread and unlocks the directory. Appends
    /// after this are dropped. Only through ``relinquish()`` (or on a queue made for a test).
    private func close() {
        syncToDisk()
        condition.withLock {
            closed = true
            condition.broadcast()
            if lockDescriptor >= 0 {
                posixClose(lockDescriptor)
                lockDescriptor = -1
            }
        }
    }

    // MARK: Writer

    private func writerLoop() {
        CrashGuard.prepareCurrentThread()
        while true {
            condition.lock()
            while pending.isEmpty, !closed { condition.wait() }
            if pending.isEmpty, closed {
                condition.unlock()
                return
            }
            let group = pending
            condition.unlock()

            var written: [Entry] = []
            var notSynced: [String] = []
            var folders: Set<String> = []
            for item in group {
                let error = writeFileAtomically(item.data, to: url(item.name), fsync: item.durable)
                guard error == 0 else { continue }
                written.append(Entry(name: item.name, bytes: item.data.count))
                if item.durable {
                    folders.insert(url(item.name).deletingLastPathComponent().path)
                } else {
                    notSynced.append(item.name)
                }
            }
            for folder in folders { fsyncPath(folder) }

            condition.lock()
            unsynced.formUnion(notSynced)
            pending.removeFirst(group.count)
            droppedCount += group.count - written.count
            entries.append(contentsOf: written)
            totalBytes += written.reduce(0) { $0 + $1.bytes }
            evictLocked()
            writtenBelow = max(writtenBelow, (group.last?.sequence ?? 0) + 1)
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Drops the oldest unleased guard reports while both stores together are over the byte
    /// cap; the kept store is never touched.
    private func evictLocked() {
        var victims: [Entry] = []
        var bytes = totalBytes
        for entry in entries where bytes > maxBytesValue && entry.store == .evictable && !leased.contains(entry.name) {
            victims.append(entry)
            bytes -= entry.bytes
        }
        guard !victims.isEmpty else { return }
        let evictedNames = victims.map { $0.name + ".evicted" }
        for (victim, evicted) in zip(victims, evictedNames) { rename(url(victim.name).path, url(evicted).path) }
        Self.evictionHook?("renamed")
        droppedCount += victims.count
        persistDropped(names: evictedNames)
        Self.evictionHook?("counted")
        for evicted in evictedNames { unlink(url(evicted).path) }
        forgetLocked(Set(victims.map(\.name)))
    }

    private func forgetLocked(_ names: Set<String>) {
        entries.removeAll { entry in
            guard names.contains(entry.name) else { return false }
            totalBytes -= entry.bytes
            return true
        }
        leased.subtract(names)
        unsynced.subtract(names)
    }

    private func url(_ name: String) -> URL { directory.appendingPathComponent(name) }

    /// The count, then the names of evicted files it already includes.
    private func persistDropped(names: [String]) {
        let text = (["\(droppedCount)"] + names).joined(separator: "\n") + "\n"
        try? writeFileAtomically(Data(text.utf8), to: url(Self.droppedFile))
    }
}

private func posixOpen(_ path: String, directory: Bool = false) -> Int32 {
    directory ? open(path, O_RDONLY | O_CLOEXEC) : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
}

private func posixClose(_ fd: Int32) { _ = close(fd) }

/// Opens `path` and fsyncs it (a file, or a folder so that renames in it are durable).
private func fsyncPath(_ path: String) {
    DiskQueue.fsyncHook?(path)
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd >= 0 {
        fsync(fd)
        posixClose(fd)
    }
}

/// Writes `data` to a temporary file beside `url` and renames it into place: a crash leaves
/// the old file or the new one, never a torn one. `fsync`: the file is synced before the
/// rename (power-loss durability; the caller syncs the folder). Returns 0 or an errno.
func writeFileAtomically(_ data: Data, to url: URL, fsync shouldSync: Bool) -> Int32 {
    let temporary = url.path + ".tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    if fd < 0 { return errno }
    if shouldSync { DiskQueue.fsyncHook?(url.path) }
    let failed: Int32 = data.withUnsafeBytes { bytes -> Int32 in
        var done = 0
        while done < bytes.count {
            let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            done += n
        }
        return shouldSync && fsync(fd) != 0 ? errno : 0
    }
    posixClose(fd)
    if failed != 0 || rename(temporary, url.path) != 0 {
        let error = failed != 0 ? failed : errno
        unlink(temporary)
        return error
    }
    return 0
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
