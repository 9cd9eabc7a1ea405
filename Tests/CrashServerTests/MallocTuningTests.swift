import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MallocTuningTests {
    @Test func glibcsOwnVariablesWin() {
        #if canImport(Glibc)
        #expect(MallocTuning.apply(environment: ["MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "8"]).isEmpty)
        #endif
    }

    /// Once a large block is freed, glibc's own threshold would serve the next 1 MiB buffer from
    /// its heap, where freed pages stay resident; with the threshold fixed it is mapped on its
    /// own (and unmapped when freed). In a process of its own (an exit test): in this one,
    /// earlier tests leave free heap space, and glibc maps a block only when its heap has no
    /// room for it, whatever the threshold.
    @Test func aFreedLargeBlockDoesNotLiftTheMmapThreshold() async {
        #if canImport(Glibc)
        await #expect(processExitsWith: .success) {
            guard MallocTuning.apply(environment: ["MALLOC_ARENA_MAX": "8"]) == .mmapThreshold else { exit(2) }
            free(malloc(8 << 20))
            guard let buffer = malloc(1 << 20) else { exit(3) }
            // glibc marks a block it mapped on its own with bit 2 of the size word before it.
            let size = buffer.load(fromByteOffset: -MemoryLayout<UInt>.size, as: UInt.self)
            exit(size & 2 != 0 ? 0 : 1)
        }
        #endif
    }

    /// Eight more threads that allocate at once make no arena beyond those the process had
    /// already (its test threads took some before the setting), where glibc would give each one
    /// of its own, up to 8 per core: without the setting this process went from 3 arenas to 11.
    /// Counted in `malloc_info`'s report, one `<heap>` per arena; in a process of its own (an
    /// exit test). That a server set so first thing has the main heap alone is
    /// `MallocArenaTests`'.
    @Test func threadsMakeNoMoreArenas() async {
        #if canImport(Glibc)
        await #expect(processExitsWith: .success) {
            guard MallocTuning.apply(environment: ["MALLOC_MMAP_THRESHOLD_": "131072"]) == .arenas else { exit(2) }
            guard let symbol = dlsym(nil, "malloc_info") else { exit(3) }
            let mallocInfo = unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32).self)
            func arenas() -> Int {
                var text: UnsafeMutablePointer<CChar>?
                var length = 0
                guard let stream = open_memstream(&text, &length), mallocInfo(0, stream) == 0 else { exit(4) }
                fclose(stream)
                defer { free(text) }
                return String(cString: text!).components(separatedBy: "<heap nr=").count - 1
            }
            let before = arenas()
            let allocated = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            for _ in 0..<8 {
                Thread.detachNewThread {
                    let block = malloc(64)
                    allocated.signal()
                    release.wait()
                    free(block)
                }
            }
            for _ in 0..<8 { allocated.wait() }
            let after = arenas()
            for _ in 0..<8 { release.signal() }
            exit(after <= max(before, MallocTuning.arenas) ? 0 : 1)
        }
        #endif
    }
}
