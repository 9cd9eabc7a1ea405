import CrashWire
import Foundation

/// Wild-pointer guard (kind `wildPointer`) for raw memory: an allocator whose handles go
/// stale safely, after the seed's zombie objects with a bounded quarantine.
///
/// Raw pointers used after `deallocate()` read garbage, corrupt the heap or crash
/// (a second `deallocate()` aborts in the C library: "free(): double free detected",
/// SIGABRT). Memory from this allocator is reached through a ``Buffer`` handle, and
/// every access checks the handle:
///
/// - a read, write or `withUnsafeMutableBytes` through a freed handle is refused
///   (`nil`/`false`) and recorded: `*** -[RawBuffer load]: message sent to deallocated buffer #12 (64 bytes)`;
/// - freeing a freed handle is refused and recorded:
///   `*** -[RawBuffer deallocate]: double free of buffer #12 (64 bytes)`;
/// - an access outside the buffer is refused and recorded:
///   `-[RawBuffer load]: bytes [60 ..< 68) beyond bounds [0 ..< 64) of buffer #12`.
///
/// Freed blocks are not returned to the system at once: they are filled with a poison
/// byte (`0xDB`) and held in a quarantine until the quarantine exceeds its byte budget
/// (2 MiB by default, like Baymax's zombie cache); the oldest are then really freed. When
/// a block leaves the quarantine its poison is checked: a block written through a raw
/// pointer that escaped `withUnsafeMutableBytes` after it was freed is recorded as
/// `*** -[RawBuffer deallocate]: buffer #12 (64 bytes) was written after it was freed (first changed byte at offset 3)`.
///
/// Handles are never reused, so stale handles are recognised even after their block left
/// the quarantine. Thread-safe.
public final class GuardedAllocator: @unchecked Sendable {
    /// A handle to a block from a ``GuardedAllocator``.
    public struct Buffer: Hashable, Sendable, CustomStringConvertible {
        /// Never reused within one allocator.
        public let id: UInt64
        /// The usable size.
        public let byteCount: Int

        public var description: String { "buffer #\(id) (\(byteCount) bytes)" }
    }

    /// The process-wide allocator, with a 2 MiB quarantine.
    public static let shared = GuardedAllocator()

    /// The quarantine's byte budget.
    public let quarantineBudget: Int
    /// The byte freed blocks are filled with.
    public let poison: UInt8

    private struct Block {
        let pointer: UnsafeMutableRawPointer
        let byteCount: Int
    }

    private struct State {
        var nextID: UInt64 = 1
        var live: [UInt64: Block] = [:]
        var quarantine: [(id: UInt64, block: Block)] = []
        var quarantineHead = 0
        var quarantined: [UInt64: Block] = [:]
        var quarantinedBytes = 0
    }

    private let state = LockedBox(State())

    /// An allocator whose quarantine holds up to `quarantineBudget` bytes of freed blocks.
    public init(quarantineBudget: Int = 2 << 20, poison: UInt8 = 0xDB) {
        self.quarantineBudget = max(0, quarantineBudget)
        self.poison = poison
    }

    deinit {
        state.withLock { state in
            for block in state.live.values { block.pointer.deallocate() }
            for block in state.quarantined.values { block.pointer.deallocate() }
        }
    }

    /// Allocates `byteCount` zeroed bytes aligned to `alignment`.
    public func allocate(byteCount: Int, alignment: Int = 16) -> Buffer {
        let size = max(byteCount, 0)
        let pointer = UnsafeMutableRawPointer.allocate(byteCount: max(size, 1), alignment: max(alignment, 1))
        pointer.initializeMemory(as: UInt8.self, repeating: 0, count: max(size, 1))
        let id = state.withLock { state -> UInt64 in
            let id = state.nextID
            state.nextID += 1
            state.live[id] = Block(pointer: pointer, byteCount: size)
            return id
        }
        return Buffer(id: id, byteCount: size)
    }

    /// Frees `buffer` into the quarantine. Returns `false` (recorded) for a double free or
    /// a handle this allocator never gave out.
    @discardableResult
    public func deallocate(_ buffer: Buffer, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Bool {
        let poison = self.poison
        let (freed, evicted) = state.withLock { state -> (Bool, [(UInt64, Block)]) in
            guard let block = state.live.removeValue(forKey: buffer.id) else { return (false, []) }
            block.pointer.initializeMemory(as: UInt8.self, repeating: poison, count: max(block.byteCount, 1))
            state.quarantine.append((buffer.id, block))
            state.quarantined[buffer.id] = block
            state.quarantinedBytes += block.byteCount
            return (true, Self.evict(&state, budget: quarantineBudget))
        }
        let site = CallSite(fileID: fileID, line: line, function: function)
        release(evicted, site: site)
        if !freed {
            record(
                known(buffer)
                    ? "*** -[RawBuffer deallocate]: double free of \(buffer)"
                    : "*** -[RawBuffer deallocate]: pointer being freed was not allocated: \(buffer)",
                action: "ignored the free", site: site
            )
        }
        return freed
    }

    /// Reads a `T` at `offset` (unaligned reads allowed), or `nil` (recorded) through a
    /// stale handle or outside the buffer. `T` must be a trivial type.
    public func load<T>(
        _ type: T.Type = T.self, fromByteOffset offset: Int = 0, in buffer: Buffer,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> T? {
        access(buffer, "load", offset, MemoryLayout<T>.size, CallSite(fileID: fileID, line: line, function: function)) {
            $0.loadUnaligned(fromByteOffset: offset, as: T.self)
        }
    }

    /// Writes `value` at `offset`; returns `false` (recorded) through a stale handle or
    /// outside the buffer. `T` must be a trivial type.
    @discardableResult
    public func storeBytes<T>(
        of value: T, toByteOffset offset: Int = 0, in buffer: Buffer,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        access(buffer, "storeBytes", offset, MemoryLayout<T>.size, CallSite(fileID: fileID, line: line, function: function)) {
            $0.storeBytes(of: value, toByteOffset: offset, as: T.self)
        } != nil
    }

    /// Calls `body` with the buffer's bytes, or returns `nil` (recorded) through a stale
    /// handle. The pointer must not escape `body`. The allocator's lock is held during
    /// `body`: do not call back into this allocator from it.
    public func withUnsafeMutableBytes<R>(
        _ buffer: Buffer, fileID: String = #fileID, line: Int = #line, function: String = #function,
        _ body: (UnsafeMutableRawBufferPointer) throws -> R
    ) rethrows -> R? {
        let site = CallSite(fileID: fileID, line: line, function: function)
        let result: R?? = try state.withLock { state in
            guard let block = state.live[buffer.id] else { return .none }
            return .some(try body(UnsafeMutableRawBufferPointer(start: block.pointer, count: block.byteCount)))
        }
        if let result { return result }
        recordStale(buffer, "withUnsafeMutableBytes", site: site)
        return nil
    }

    /// Whether `buffer` is live.
    public func isLive(_ buffer: Buffer) -> Bool {
        state.withLock { $0.live[buffer.id] != nil }
    }

    /// Bytes of freed blocks held in the quarantine.
    public var quarantinedBytes: Int { state.withLock { $0.quarantinedBytes } }

    /// Number of live blocks.
    public var liveCount: Int { state.withLock { $0.live.count } }

    /// Really frees every quarantined block, checking its poison first.
    public func drainQuarantine(fileID: String = #fileID, line: Int = #line, function: String = #function) {
        let evicted = state.withLock { Self.evict(&$0, budget: 0) }
        release(evicted, site: CallSite(fileID: fileID, line: line, function: function))
    }

    // MARK: Internals

    private func access<R>(
        _ buffer: Buffer, _ selector: String, _ offset: Int, _ size: Int, _ site: CallSite,
        _ body: (UnsafeMutableRawPointer) -> R
    ) -> R? {
        let outcome: AccessOutcome<R> = state.withLock { state in
            guard let block = state.live[buffer.id] else { return .stale }
            guard offset >= 0, size <= block.byteCount, offset <= block.byteCount - size else { return .outOfBounds(block.byteCount) }
            return .done(body(block.pointer))
        }
        switch outcome {
        case .done(let value):
            return value
        case .stale:
            recordStale(buffer, selector, site: site)
        case .outOfBounds(let count):
            record(
                "-[RawBuffer \(selector)]: bytes [\(offset) ..< \(offset + size)) beyond bounds [0 ..< \(count)) of buffer #\(buffer.id)",
                action: "refused the access", site: site)
        }
        return nil
    }

    private enum AccessOutcome<R> { case done(R), stale, outOfBounds(Int) }

    private func known(_ buffer: Buffer) -> Bool {
        state.withLock { buffer.id > 0 && buffer.id < $0.nextID }
    }

    private func recordStale(_ buffer: Buffer, _ selector: String, site: CallSite) {
        record(
            known(buffer)
                ? "*** -[RawBuffer \(selector)]: message sent to deallocated \(buffer)"
                : "*** -[RawBuffer \(selector)]: message sent to unknown \(buffer)",
            action: "refused the access", site: site
        )
    }

    /// Pops the oldest quarantined blocks until the quarantine fits `budget`.
    private static func evict(_ state: inout State, budget: Int) -> [(UInt64, Block)] {
        var out: [(UInt64, Block)] = []
        while state.quarantinedBytes > budget || (budget == 0 && state.quarantineHead < state.quarantine.count) {
            guard state.quarantineHead < state.quarantine.count else { break }
            let (id, block) = state.quarantine[state.quarantineHead]
            state.quarantineHead += 1
            state.quarantined[id] = nil
            state.quarantinedBytes -= block.byteCount
            out.append((id, block))
        }
        if state.quarantineHead > 64 && state.quarantineHead * 2 > state.quarantine.count {
            state.quarantine.removeFirst(state.quarantineHead)
            state.quarantineHead = 0
        }
        return out
    }

    /// Checks each evicted block's poison, records a write after free, and frees it.
    private func release(_ evicted: [(UInt64, Block)], site: CallSite) {
        for (id, block) in evicted {
            let bytes = UnsafeRawBufferPointer(start: block.pointer, count: block.byteCount)
            if let changed = bytes.firstIndex(where: { $0 != poison }) {
                record(
                    "*** -[RawBuffer deallocate]: buffer #\(id) (\(block.byteCount) bytes) was written after it was freed (first changed byte at offset \(changed))",
                    action: "released the block", site: site)
            }
            block.pointer.deallocate()
        }
    }

    private func record(_ reason: @autoclosure () -> String, action: String, site: CallSite) {
        GuardRecorder.record(.wildPointer, site: site, in: nil, reason: reason(), context: ["action": action])
    }
}
