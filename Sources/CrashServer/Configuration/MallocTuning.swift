import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// glibc's allocator as the server sets it at start: large buffers are mapped on their own and
/// given back when freed, and the threads share one arena.
///
/// glibc maps an allocation of at least its mmap threshold (128 KiB at start) on its own, but
/// raises the threshold to the size of each such block freed, up to 32 MiB: after the first
/// commit the bind buffers (4 to 8 MiB), the bodies being read and the HTTP buffers all come
/// from its heaps, whose freed pages stay resident. Fixing the threshold took the peak RSS at
/// batch 100 x 64 from 102 to 113 MB to 96 to 99 MB (docs/performance.md).
///
/// glibc also gives each new thread an arena of its own, up to 8 per core, and a block freed in
/// one arena serves only the threads of that arena: each arena grows to its own high-water mark
/// and keeps its free pages, and the next burst, on other threads, takes new ones. Capping the
/// arenas took the peak RSS under the largest bodies, on a server that had run batches of 100 and
/// 1000 first, from 173 to 184 MB to 145 to 155 MB. With one arena every thread reuses the pages
/// another freed: at batch 100 x 64 the mean peak of five runs is 114.6 MB against 120.8 with the
/// main heap and two arenas beside it, at the same server CPU per report (docs/performance.md,
/// "Memory under load"). glibc never gives up an arena it made, so the cap holds only when it
/// is set before a second thread allocates: `crash-server` applies it first thing in `main`.
///
/// glibc's own variables (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_ARENA_MAX`) still win when set.
public enum MallocTuning {
    /// Allocations of at least this many bytes get their own mapping.
    public static let mmapThreshold = 256 << 10
    /// The most arenas glibc makes for the process's threads: the main heap alone.
    public static let arenas = 1

    /// What ``apply(environment:)`` set.
    public struct Settings: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let mmapThreshold = Settings(rawValue: 1)
        public static let arenas = Settings(rawValue: 2)
    }

    /// Fixes glibc's mmap threshold at ``mmapThreshold`` unless `environment` sets
    /// `MALLOC_MMAP_THRESHOLD_`, and its arenas at ``arenas`` unless it sets `MALLOC_ARENA_MAX`;
    /// returns what it set. Does nothing without glibc. Call it before the process starts
    /// threads: a thread that has allocated keeps its arena, and glibc keeps every arena it made.
    @discardableResult
    public static func apply(environment: [String: String] = ProcessInfo.processInfo.environment) -> Settings {
        #if canImport(Glibc)
        // `mallopt` is not in Swift's Glibc module; looked up the way the C linker would.
        guard let symbol = dlsym(nil, "mallopt") else { return [] }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        var applied: Settings = []
        let mmapThresholdOption: Int32 = -3  // M_MMAP_THRESHOLD in <malloc.h>
        if environment["MALLOC_MMAP_THRESHOLD_"] == nil, mallopt(mmapThresholdOption, Int32(mmapThreshold)) == 1 {
            applied.insert(.mmapThreshold)
        }
        let arenaMaxOption: Int32 = -8  // M_ARENA_MAX in <malloc.h>
        if environment["MALLOC_ARENA_MAX"] == nil, mallopt(arenaMaxOption, Int32(arenas)) == 1 {
            applied.insert(.arenas)
        }
        return applied
        #else
        return []
        #endif
    }

    /// Hands the free pages of every arena back to the system (`malloc_trim(0)`, which
    /// `HeapTrimmer` calls when ingest goes quiet); true when some were. False without glibc.
    @Sendable public static func trim() -> Bool {
        #if canImport(Glibc)
        // Not in Swift's Glibc module either.
        guard let symbol = dlsym(nil, "malloc_trim") else { return false }
        let mallocTrim = unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
        return mallocTrim(0) == 1
        #else
        return false
        #endif
    }
}
