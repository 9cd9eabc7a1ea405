import AsyncHTTPClient
import Foundation
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The allocator of the running `crash-server` (``MallocTuning``): its threads share glibc's main
/// heap, with no arena beside it, after ingest traffic on several connections at once.
@Suite struct MallocArenaTests {
    @Test func aServingProcessAllocatesFromTheMainHeapAlone() async throws {
        #if canImport(Glibc)
        let project = try await makeProject()
        let server = try await ServerProcess(
            arguments: ["--rate-limit", "0"], environment: ["DATABASE_URL": TestEnvironment.databaseURL])
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let statuses = await withTaskGroup(of: [Int].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var statuses: [Int] = []
                    for _ in 0..<3 {
                        let body = batchBody((0..<20).map { _ in reportJSON(id: UUID()) })
                        statuses.append(await post(client, url: server.baseURL, key: project.ingestKey, body: body).status)
                    }
                    return statuses
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        let maps = try String(contentsOfFile: "/proc/\(server.process.processIdentifier)/maps", encoding: .utf8)
        try await client.shutdown()
        #expect(await server.terminate() == 0)
        #expect(statuses == Array(repeating: 202, count: 24))
        #expect(Self.glibcArenaHeaps(maps) == 0)
        #endif
    }

    /// The heaps of glibc's arenas other than the main one in a `/proc/<pid>/maps` text: each is an
    /// anonymous mapping of 64 MiB aligned to 64 MiB, its part in use readable and writable and the
    /// rest reserved without access (two adjacent lines, or one when it is all in use).
    static func glibcArenaHeaps(_ maps: String) -> Int {
        let heapBytes: UInt64 = 64 << 20
        struct Mapping {
            var start: UInt64
            var end: UInt64
            var permissions: Substring
        }
        let anonymous: [Mapping] = maps.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // address, permissions, offset, device, inode, and a path for all but anonymous ones.
            guard fields.count == 5, fields[4] == "0" else { return nil }
            let bounds = fields[0].split(separator: "-").compactMap { UInt64($0, radix: 16) }
            guard bounds.count == 2 else { return nil }
            return Mapping(start: bounds[0], end: bounds[1], permissions: fields[1])
        }
        var heaps = 0
        for (index, mapping) in anonymous.enumerated()
        where mapping.start % heapBytes == 0 && mapping.permissions == "rw-p" {
            var end = mapping.end
            if end - mapping.start < heapBytes, index + 1 < anonymous.count, anonymous[index + 1].start == end,
                anonymous[index + 1].permissions == "---p"
            {
                end = anonymous[index + 1].end
            }
            if end - mapping.start == heapBytes { heaps += 1 }
        }
        return heaps
    }

    /// The heaps counted in a server's maps with two arenas beside the main heap, and none counted
    /// in what only looks like one (a thread's stack, an unaligned mapping, a file).
    @Test func countsArenaHeapsInMaps() {
        let maps = """
            5581f0a00000-5581f0c00000 rw-p 00000000 00:00 0                          [heap]
            7f3a04000000-7f3a04a6e000 rw-p 00000000 00:00 0
            7f3a04a6e000-7f3a08000000 ---p 00000000 00:00 0
            7f3a0c000000-7f3a10000000 rw-p 00000000 00:00 0
            7f3a10000000-7f3a10021000 rw-p 00000000 00:00 0
            7f3a10021000-7f3a14000000 ---p 00000000 00:00 0
            7f3a14000000-7f3a14800000 rw-p 00000000 00:00 0
            7f3a14800000-7f3a14801000 ---p 00000000 00:00 0
            7f3a18001000-7f3a18021000 rw-p 00000000 00:00 0
            7f3a18021000-7f3a1c001000 ---p 00000000 00:00 0
            7f3a20000000-7f3a24000000 r--p 00000000 fd:01 1234                       /usr/lib/locale/archive
            """
        // The heap in use to its end (7f3a0c...) counts as one; 7f3a10... with its reserve as one;
        // 7f3a04... too: three. Not 7f3a14... (8 MiB and a guard page: a stack), not 7f3a18001...
        // (unaligned), not the file.
        #expect(Self.glibcArenaHeaps(maps) == 3)
    }
}
