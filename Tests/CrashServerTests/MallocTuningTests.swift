import Testing

@testable import CrashServer

#if canImport(Glibc)
import Glibc
#endif

@Suite struct MallocTuningTests {
    /// Once a large block is freed, glibc's own threshold would serve the next 1 MiB buffer from
    /// its heap, where freed pages stay resident; with the threshold fixed it is mapped on its
    /// own (and unmapped when freed).
    @Test func aFreedLargeBlockDoesNotLiftTheMmapThreshold() throws {
        #if canImport(Glibc)
        #expect(!MallocTuning.apply(environment: ["MALLOC_MMAP_THRESHOLD_": "131072"]))
        #expect(MallocTuning.apply(environment: [:]))
        free(malloc(8 << 20))
        let buffer = try #require(malloc(1 << 20))
        defer { free(buffer) }
        // glibc marks a block it mapped on its own with bit 2 of the size word before it.
        let size = buffer.load(fromByteOffset: -MemoryLayout<UInt>.size, as: UInt.self)
        #expect(size & 2 != 0)
        #endif
    }
}
