import CrashGuard
import CrashWire
import Foundation
import Testing

private final class Delegate {
    var name = "d"
}

@Suite("wildPointer guard")
struct WildPointerGuardTests {
    @Test func unguardedUnownedReadDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            final class Object { var name = "x" }
            var object: Object? = Object()
            unowned let reference = object!
            object = nil
            _ = runtimeOpaque(reference).name
        }
    }

    @Test func unguardedDoubleFreeDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            let pointer = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
            pointer.deallocate()
            runtimeOpaque(pointer).deallocate()
        }
    }

    @Test func unownedReferenceAfterRelease() {
        var delegate: Delegate? = Delegate()
        let reference = GuardedUnowned(delegate!)
        let text = objectAddress(delegate!)
        #expect(recording { reference.get()?.name }.value == "d")
        delegate = nil
        let (value, events) = recording { reference.get() }
        #expect(value == nil && !reference.isAlive)
        expectOne(events, .wildPointer, "Attempted to read an unowned reference but object <Delegate \(text)> was already destroyed")
    }

    @Test func liveBufferReadsAndWrites() {
        let allocator = GuardedAllocator(quarantineBudget: 1024)
        let buffer = allocator.allocate(byteCount: 16)
        let events = recording {
            #expect(allocator.storeBytes(of: UInt32(0xDEAD_BEEF), toByteOffset: 3, in: buffer))
            #expect(allocator.load(UInt32.self, fromByteOffset: 3, in: buffer) == 0xDEAD_BEEF)
            #expect(allocator.load(UInt8.self, in: buffer) == 0)
            #expect(allocator.withUnsafeMutableBytes(buffer) { $0.count } == 16)
        }.events
        #expect(events.isEmpty)
        #expect(allocator.deallocate(buffer))
    }

    @Test func staleReadWriteAndFreeAreRefused() {
        let allocator = GuardedAllocator()
        let buffer = allocator.allocate(byteCount: 64)
        allocator.deallocate(buffer)
        #expect(allocator.quarantinedBytes == 64)
        let read = recording { allocator.load(UInt64.self, in: buffer) }
        #expect(read.value == nil)
        expectOne(read.events, .wildPointer, "*** -[RawBuffer load]: message sent to deallocated buffer #\(buffer.id) (64 bytes)")
        let write = recording { allocator.storeBytes(of: 1, in: buffer) }
        #expect(!write.value)
        expectOne(write.events, .wildPointer, "*** -[RawBuffer storeBytes]: message sent to deallocated buffer #\(buffer.id) (64 bytes)")
        let bytes = recording { allocator.withUnsafeMutableBytes(buffer) { $0.count } }
        #expect(bytes.value == nil)
        expectOne(bytes.events, .wildPointer, "*** -[RawBuffer withUnsafeMutableBytes]: message sent to deallocated buffer #\(buffer.id) (64 bytes)")
        let free = recording { allocator.deallocate(buffer) }
        #expect(!free.value)
        let event = expectOne(free.events, .wildPointer, "*** -[RawBuffer deallocate]: double free of buffer #\(buffer.id) (64 bytes)")
        #expect(event?.context["action"] == "ignored the free")
    }

    @Test func outOfBoundsAndUnknownHandles() {
        let allocator = GuardedAllocator()
        let buffer = allocator.allocate(byteCount: 8)
        let (value, events) = recording { allocator.load(UInt64.self, fromByteOffset: 4, in: buffer) }
        #expect(value == nil)
        expectOne(events, .wildPointer, "-[RawBuffer load]: bytes [4 ..< 12) beyond bounds [0 ..< 8) of buffer #\(buffer.id)")
        let foreign = GuardedAllocator().allocate(byteCount: 8)
        let other = GuardedAllocator()
        expectOne(
            recording { other.deallocate(foreign) }.events, .wildPointer,
            "*** -[RawBuffer deallocate]: pointer being freed was not allocated: buffer #\(foreign.id) (8 bytes)")
    }

    @Test func quarantineIsBounded() {
        let allocator = GuardedAllocator(quarantineBudget: 1000)
        let buffers = (0..<5).map { _ in allocator.allocate(byteCount: 400) }
        let events = recording { for buffer in buffers { allocator.deallocate(buffer) } }.events
        #expect(events.isEmpty)
        #expect(allocator.quarantinedBytes == 800)
        #expect(allocator.liveCount == 0)
        // Even after leaving the quarantine, a stale handle is still recognised.
        expectOne(
            recording { allocator.deallocate(buffers[0]) }.events, .wildPointer,
            "*** -[RawBuffer deallocate]: double free of buffer #\(buffers[0].id) (400 bytes)")
        allocator.drainQuarantine()
        #expect(allocator.quarantinedBytes == 0)
    }

    @Test func defaultQuarantineIsTwoMebibytes() {
        #expect(GuardedAllocator.shared.quarantineBudget == 2 << 20)
    }

    @Test func writeAfterFreeThroughAnEscapedPointerIsDetected() {
        let allocator = GuardedAllocator()
        let buffer = allocator.allocate(byteCount: 32)
        nonisolated(unsafe) var escaped: UnsafeMutableRawPointer?
        allocator.withUnsafeMutableBytes(buffer) { escaped = $0.baseAddress }
        allocator.deallocate(buffer)
        escaped!.storeBytes(of: 7, toByteOffset: 5, as: UInt8.self)  // the wild write, into quarantined memory
        let events = recording { allocator.drainQuarantine() }.events
        expectOne(
            events, .wildPointer,
            "*** -[RawBuffer deallocate]: buffer #\(buffer.id) (32 bytes) was written after it was freed (first changed byte at offset 5)")
    }

    @Test func allocatorIsThreadSafe() {
        let allocator = GuardedAllocator(quarantineBudget: 4096)
        let events = recording {
            DispatchQueue.concurrentPerform(iterations: 500) { i in
                let buffer = allocator.allocate(byteCount: 8 + i % 64)
                allocator.storeBytes(of: UInt8(i % 256), in: buffer)
                _ = allocator.load(UInt8.self, in: buffer)
                allocator.deallocate(buffer)
            }
        }.events
        #expect(events.isEmpty)
        #expect(allocator.liveCount == 0 && allocator.quarantinedBytes <= 4096)
    }
}
