import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// glibc's allocator as the server sets it at start: large buffers are mapped on their own and
/// given back when freed.
///
/// glibc maps an allocation of at least its mmap threshold (128 KiB at start) on its own, but
/// raises the threshold to the size of each such block freed, up to 32 MiB: after the first
/// commit the bind buffers (4 to 8 MiB), the bodies being read and the HTTP buffers all come
/// from its heaps, whose freed pages stay resident. Fixing the threshold took the peak RSS at
/// batch 100 x 64 from 102 to 113 MB to 96 to 99 MB (docs/performance.md, session 10).
/// `MALLOC_MMAP_THRESHOLD_`, glibc's own variable, still wins when it is set.
public enum MallocTuning {
    /// Allocations of at least this many bytes get their own mapping.
    public static let mmapThreshold = 256 << 10

    /// Fixes glibc's mmap threshold at ``mmapThreshold``, unless `environment` sets
    /// `MALLOC_MMAP_THRESHOLD_`; `true` when it was set. Does nothing without glibc.
    @discardableResult
    public static func apply(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        #if canImport(Glibc)
        // `mallopt` is not in Swift's Glibc module; looked up the way the C linker would.
        guard environment["MALLOC_MMAP_THRESHOLD_"] == nil, let symbol = dlsym(nil, "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        let mmapThresholdOption: Int32 = -3  // M_MMAP_THRESHOLD in <malloc.h>
        return mallopt(mmapThresholdOption, Int32(mmapThreshold)) == 1
        #else
        return false
        #endif
    }
}
