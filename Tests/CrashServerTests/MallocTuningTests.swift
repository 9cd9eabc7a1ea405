import Testing

@testable import CrashServer

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MallocTuningTests {
    @Test func glibcsOwnVariableWins() {
        #if canImport(Glibc)
        #expect(!MallocTuning.apply(environment: ["MALLOC_MMAP_THRESHOLD_": "131072"]))
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
            guard MallocTuning.apply(environment: [:]) else { exit(2) }
            free(malloc(8 << 20))
            guard let buffer = malloc(1 << 20) else { exit(3) }
            // glibc marks a block it mapped on its own with bit 2 of the size word before it.
            let size = buffer.load(fromByteOffset: -MemoryLayout<UInt>.size, as: UInt.self)
            exit(size & 2 != 0 ? 0 : 1)
        }
        #endif
    }
}
