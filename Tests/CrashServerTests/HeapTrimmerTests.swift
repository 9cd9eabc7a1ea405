import Foundation
import Logging
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

#if canImport(Glibc)
import Glibc
#endif

@Suite struct HeapTrimmerTests {
    /// The heap is trimmed once after ingest requests have come and gone, never while one is
    /// open, and never again until another comes.
    @Test func trimsOnceWhenIngestGoesQuiet() async throws {
        let budget = BodyByteBudget(limit: 1 << 20)
        let trims = Atomic<Int>(0)
        let trimmer = HeapTrimmer(
            budget: budget, interval: 0.01,
            trim: {
                trims.add(1, ordering: .relaxed)
                return true
            }, logger: Logger(label: "test"))
        let running = Task { try await trimmer.run() }
        defer { running.cancel() }
        func waitForTrims(_ n: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(10)
            while trims.load(ordering: .relaxed) < n, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        }
        // Idle from the start: nothing to give back.
        try await Task.sleep(for: .milliseconds(100))
        #expect(trims.load(ordering: .relaxed) == 0)
        // A request in flight, however long: no trim under it.
        var request: BodyByteBudget.Reservation? = BodyByteBudget.Reservation(budget, project: 1)
        try request?.grow(to: 1000)
        try await Task.sleep(for: .milliseconds(100))
        #expect(trims.load(ordering: .relaxed) == 0)
        // It ends: one trim, then none while nothing comes.
        request = nil
        try await waitForTrims(1)
        try await Task.sleep(for: .milliseconds(100))
        #expect(trims.load(ordering: .relaxed) == 1)
        // Another request, come and gone between two looks: trimmed again.
        _ = BodyByteBudget.Reservation(budget, project: 1)
        try await waitForTrims(2)
        #expect(trims.load(ordering: .relaxed) == 2)
    }

    /// `malloc_trim` through ``MallocTuning/trim()`` gives back the pages of blocks freed
    /// between ones that live on, which `free` leaves resident. In a process of its own (an
    /// exit test), so that nothing else allocates meanwhile.
    @Test func trimGivesFreedPagesBack() async {
        #if canImport(Glibc)
        await #expect(processExitsWith: .success) {
            func anonymousMB() -> Int { hostileResidentBytes(field: "RssAnon:") >> 20 }
            // 64 MB of 64 KiB blocks, each written, each followed by a small one that lives on
            // (the strings of a burst between the reports that stay queued): freeing the large
            // ones gives nothing back by itself.
            var keepers: [UnsafeMutableRawPointer] = []
            keepers.reserveCapacity(1024)
            let blocks = (0..<1024).map { _ in
                let block = malloc(64 << 10)!.initializeMemory(as: UInt8.self, repeating: 1, count: 64 << 10)
                keepers.append(malloc(64)!)
                return block
            }
            for block in blocks { free(block) }
            let before = anonymousMB()
            guard MallocTuning.trim() else { exit(2) }
            let after = anonymousMB()
            for keeper in keepers { free(keeper) }
            exit(before - after >= 48 ? 0 : 1)
        }
        #endif
    }
}
