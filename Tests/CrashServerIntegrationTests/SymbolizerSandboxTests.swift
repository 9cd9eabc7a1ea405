import CrashDebugFiles
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// A named pipe that tells whether anyone opened it for reading: a file the symbolizer must
/// never read. Opening a FIFO for reading blocks until a writer comes, so a reader is seen
/// (a non-blocking open for writing succeeds) and then let go (the write end closes: EOF).
final class TripwireFIFO: Sendable {
    let path: String

    init(at path: String) throws {
        unlink(path)
        guard mkfifo(path, 0o600) == 0 else { throw DebugFixture.FixtureError(message: "mkfifo \(path): errno \(errno)") }
        self.path = path
    }

    /// Whether a reader opened the pipe while `work` ran (watched every 20 ms).
    func watch<T: Sendable>(during work: @escaping @Sendable () async throws -> T) async throws -> (value: T, opened: Bool) {
        let done = Flag()
        let task = Task {
            defer { done.set() }
            return try await work()
        }
        var opened = false
        while !done.isSet {
            let fd = open(path, O_WRONLY | O_NONBLOCK)
            if fd >= 0 {
                opened = true
                close(fd)
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return (try await task.value, opened)
    }

    private final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        var isSet: Bool { lock.withLock { value } }
        func set() { lock.withLock { value = true } }
    }

    deinit { unlink(path) }
}

@Suite(.serialized) struct SymbolizerSandboxTests {
    static let symbolizer = SymbolizerPoolTests.symbolizer

    /// The process runs with an empty environment (the test process's has the database URL),
    /// in a directory of its own, under CPU, address-space and file-size limits.
    @Test func runsWithAnEmptyEnvironmentUnderLimits() async throws {
        #expect(ProcessInfo.processInfo.environment["CRASHGUARD_TEST_DATABASE_URL"] != nil)
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let limits = SymbolizerLimits(cpuSeconds: 120, addressSpaceBytes: 3 << 30, fileSizeBytes: 0)
        let pool = SymbolizerPool(executable: Self.symbolizer, size: 1, limits: limits, logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let outer = try fixture.outer()
        let answer = try await pool.symbolize(file: fixture.binary.path, addresses: [outer.address])
        #expect(answer.first?.last?.function == "outer")
        let pid = try #require(await pool.idleProcessIDs.first)
        let environment = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/environ"))
        #expect(environment.isEmpty, "environment: \(String(decoding: environment, as: UTF8.self).prefix(200))")
        let table = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        func limit(_ name: String) -> [Substring] {
            table.split(separator: "\n").first { $0.hasPrefix(name) }?.dropFirst(name.count).split(separator: " ") ?? []
        }
        #expect(limit("Max cpu time").prefix(2) == ["120", "120"])
        #expect(limit("Max address space").prefix(2) == ["3221225472", "3221225472"])
        #expect(limit("Max file size").prefix(2) == ["0", "0"])
        #expect(limit("Max core file size").prefix(2) == ["0", "0"])
        let cwd = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd")
        #expect(cwd != FileManager.default.currentDirectoryPath)
        #expect(cwd.contains("crashguard-symbolizer-"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: cwd) == ["empty"])
    }

    /// Requests and answers go through the pipes at the same time: a page of 20,000 addresses
    /// (about 1 MB of requests, 16 times a pipe's buffer) is answered, not deadlocked until
    /// the timeout kills the process.
    @Test func answersThousandsOfAddressesWithoutDeadlock() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let pool = SymbolizerPool(executable: Self.symbolizer, size: 1, timeout: .seconds(60), logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let outer = try fixture.outer()
        let addresses = (0..<20_000).map { outer.address + UInt64($0) % outer.size }
        let answers = try await pool.symbolize(file: fixture.binary.path, addresses: addresses)
        #expect(answers.count == addresses.count)
        #expect(answers.allSatisfy { $0.last?.function == "outer" })
    }

    /// A `.gnu_debuglink` that climbs out of the file's directory to a file of the attacker's
    /// choosing (here a FIFO standing in for `/dev/zero`): llvm-symbolizer follows it in the
    /// uploaded file as it is (the threat), never in the server's copy.
    @Test func neverFollowsADebugLink() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let fifo = try TripwireFIFO(at: fixture.directory.appendingPathComponent("zero").path)
        let climb = String(repeating: "../", count: 24) + fifo.path.dropFirst()
        var section = Array(climb.utf8) + [0]
        while section.count % 4 != 0 { section.append(0) }
        section += [0, 0, 0, 0]  // the CRC, never reached
        let sectionFile = fixture.directory.appendingPathComponent("debuglink.bin")
        try Data(section).write(to: sectionFile)
        let linked = fixture.directory.appendingPathComponent("linked")
        try DebugFixture.run(
            DebugFixture.which("objcopy") ?? "objcopy",
            ["--add-section", ".gnu_debuglink=\(sectionFile.path)", fixture.stripped.path, linked.path])
        let parsed = try ELFDebugFile(parsing: Data(contentsOf: linked))
        #expect(!parsed.lookupPatches.isEmpty)

        let pool = SymbolizerPool(executable: Self.symbolizer, size: 1, timeout: .seconds(30), logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let outer = try fixture.outer()
        let asUploaded = try await fifo.watch { try await pool.symbolize(file: linked.path, addresses: [outer.address]) }
        #expect(asUploaded.opened, "the symbolizer follows the link in the file as uploaded")

        let cache = DebugFileCache(directory: fixture.directory.appendingPathComponent("cache"), maxBytes: 1 << 30, logger: TestEnvironment.logger)
        let copy = try await cache.install(copying: linked.path)
        let asCopied = try await fifo.watch { try await pool.symbolize(file: copy.path, addresses: [outer.address]) }
        #expect(!asCopied.opened, "the server's copy names no other file")
        #expect(asCopied.value.count == 1)
    }

    /// Split DWARF: the skeleton unit names a `.dwo` file by path (here replaced by a FIFO);
    /// the server's copy never makes the symbolizer open it, and still resolves the function.
    @Test func neverReadsSplitDWARFFiles() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let split = fixture.directory.appendingPathComponent("split")
        let compiler = ["clang", "gcc", "cc"].first { DebugFixture.which($0) != nil }.flatMap(DebugFixture.which) ?? "cc"
        let build = Process()
        build.executableURL = URL(fileURLWithPath: compiler)
        build.arguments = ["-g", "-O2", "-gsplit-dwarf", "-Wl,--build-id", "-o", split.path, fixture.source.path]
        build.currentDirectoryURL = fixture.directory
        try build.run()
        build.waitUntilExit()
        try #require(build.terminationStatus == 0)
        let dwo = try #require(try FileManager.default.contentsOfDirectory(atPath: fixture.directory.path).first { $0.hasSuffix(".dwo") })
        try FileManager.default.removeItem(at: fixture.directory.appendingPathComponent(dwo))
        let fifo = try TripwireFIFO(at: fixture.directory.appendingPathComponent(dwo).path)
        let nm = try DebugFixture.run(DebugFixture.which("nm") ?? "nm", [split.path])
        let outer = try #require(
            nm.split(separator: "\n").first { $0.hasSuffix(" outer") }.flatMap { UInt64($0.split(separator: " ")[0], radix: 16) })

        let pool = SymbolizerPool(executable: Self.symbolizer, size: 1, timeout: .seconds(30), logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let asBuilt = try await fifo.watch { try await pool.symbolize(file: split.path, addresses: [outer]) }
        #expect(asBuilt.opened, "the symbolizer opens the .dwo the file names")

        let cache = DebugFileCache(directory: fixture.directory.appendingPathComponent("cache"), maxBytes: 1 << 30, logger: TestEnvironment.logger)
        let copy = try await cache.install(copying: split.path)
        let asCopied = try await fifo.watch { try await pool.symbolize(file: copy.path, addresses: [outer]) }
        #expect(!asCopied.opened)
        #expect(asCopied.value.first?.last?.function == "outer")
    }

    /// The cache stays within its bytes, dropping the least recently used copies, and drops
    /// copies unused for a week and temporary files left for an hour.
    @Test func cacheIsBounded() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cache-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let cache = DebugFileCache(directory: directory, maxBytes: 3000, logger: TestEnvironment.logger)
        let now = Date()
        func file(_ name: String, bytes: Int, used: TimeInterval) throws {
            let url = directory.appendingPathComponent(name)
            try Data(count: bytes).write(to: url)
            try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-used)], ofItemAtPath: url.path)
        }
        try file("old.elf", bytes: 10, used: 8 * 24 * 3600)
        try file("a.elf", bytes: 1000, used: 300)
        try file("b.elf", bytes: 1000, used: 200)
        try file("c.elf", bytes: 1000, used: 100)
        try file("new.elf", bytes: 1000, used: 0)
        try file(".left.tmp", bytes: 10, used: 7200)
        try file(".busy.tmp", bytes: 10, used: 10)
        #expect(cache.prune(keeping: "new.elf", now: now) == 3)
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(left == [".busy.tmp", "b.elf", "c.elf", "new.elf"])
    }
}

@Suite(.serialized) struct DebugFileUploadTests {
    func upload(
        _ client: some TestClientProtocol, _ project: ProjectCredentials, _ bytes: [UInt8], name: String = "f"
    )
        async throws -> TestResponse
    {
        try await client.execute(
            uri: "/v1/projects/\(project.project)/debug-files?name=\(name)", method: .post,
            headers: [.authorization: "Bearer \(project.readToken)", .contentType: "application/octet-stream"],
            body: ByteBuffer(bytes: bytes))
    }

    /// Each hostile file of the findings is a 400 naming what is wrong, well within 2 s (the
    /// 65,534-header file took 13 s; the 1 MB build id was a 500).
    @Test func refusesHostileHeadersQuickly() async throws {
        let project = try await makeProject()
        var manyHeaders = CraftedELF()
        let notes = (0..<4096).flatMap { _ in CraftedELF.note(type: 1, descriptor: [0, 0, 0, 0]) }
        let at = manyHeaders.append(notes)
        manyHeaders.programHeaders = Array(repeating: .init(type: 4, offset: at, size: UInt64(notes.count)), count: 65_534)
        var xnum = CraftedELF()
        xnum.append(CraftedELF.buildIDNote(Array(0..<20)))
        xnum.sectionHeaders = [.init(type: 0, offset: 0, size: 0, info: 65_535)]
        xnum.phnumField = 0xffff
        let files: [(String, [UInt8], String)] = [
            ("65534 headers", manyHeaders.build(), "more than 4096"),
            ("1 MB build id", CraftedELF.valid(buildID: [UInt8](repeating: 0xab, count: 1 << 20)), "build id"),
            ("PN_XNUM", xnum.build(), "more than 4096"),
        ]
        try await withApp { client in
            for (label, bytes, message) in files {
                let start = ContinuousClock.now
                let cpu = processCPUTime()
                let response = try await upload(client, project, bytes)
                // The contract's 2 s, on the work (CPU time, which a loaded machine does not
                // stretch); the wall clock only against waits.
                let work = processCPUTime() - cpu
                #expect(work < .seconds(2), "\(label): \(work)")
                #expect(ContinuousClock.now - start < .seconds(20), "\(label)")
                #expect(response.status == .badRequest, "\(label): \(response.status)")
                #expect(String(buffer: response.body).contains(message), "\(label): \(String(buffer: response.body))")
            }
        }
    }

    /// `CRASHGUARD_DEBUG_FILES_MAX_COUNT`: past it 413 naming it; a re-upload that replaces a
    /// stored file (or leaves it) counts once.
    @Test func countQuota() async throws {
        let project = try await makeProject()
        let config = TestEnvironment.configuration { $0.debugFilesMaxCount = 2 }
        try await withApp(config) { client in
            #expect(try await upload(client, project, CraftedELF.valid(buildID: [1, 1, 1, 1])).status == .created)
            #expect(try await upload(client, project, CraftedELF.valid(buildID: [2, 2, 2, 2])).status == .created)
            let third = try await upload(client, project, CraftedELF.valid(buildID: [3, 3, 3, 3]))
            #expect(third.status == .contentTooLarge)
            #expect(String(buffer: third.body).contains("CRASHGUARD_DEBUG_FILES_MAX_COUNT"))
            let replacing = try await upload(client, project, CraftedELF.valid(buildID: [1, 1, 1, 1], symbols: true))
            #expect(replacing.status == .ok)
            #expect(String(buffer: replacing.body).contains("\"replaced\""))
            #expect(try await upload(client, project, CraftedELF.valid(buildID: [2, 2, 2, 2])).status == .ok)
        }
    }

    /// `CRASHGUARD_DEBUG_FILES_MAX_BYTES`: past it 413 naming it; a replaced file's bytes
    /// count once (the new size instead of the old).
    @Test func bytesQuota() async throws {
        let project = try await makeProject()
        let small = CraftedELF.valid(buildID: [1, 1, 1, 1])
        let richer = CraftedELF.valid(buildID: [1, 1, 1, 1], symbols: true, padding: 1000)
        let other = CraftedELF.valid(buildID: [2, 2, 2, 2], padding: 1000)
        let config = TestEnvironment.configuration { $0.debugFilesMaxBytes = Int64(richer.count + other.count) }
        try await withApp(config) { client in
            #expect(try await upload(client, project, small).status == .created)
            #expect(try await upload(client, project, other).status == .created)
            #expect(try await upload(client, project, richer).status == .ok)
            let over = try await upload(client, project, CraftedELF.valid(buildID: [3, 3, 3, 3]))
            #expect(over.status == .contentTooLarge)
            #expect(String(buffer: over.body).contains("CRASHGUARD_DEBUG_FILES_MAX_BYTES"))
        }
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT count(*)::bigint, coalesce(sum(d.size), 0)::bigint FROM debug_files d JOIN projects p ON p.id = d.project_id
                WHERE p.slug = \(project.project)
                """, logger: TestEnvironment.logger)
            for try await (count, bytes) in rows.decode((Int64, Int64).self) {
                #expect(count == 2)
                #expect(bytes == Int64(richer.count + other.count))
            }
        }
    }

    /// A 160 MiB upload goes to a file on disk as it arrives: half-way through, the spool file
    /// holds what was sent while the body budget holds at most one write's worth; the file is
    /// then stored whole (in chunks) and read back for the symbolizer byte for byte.
    @Test func streamsUploadsToDisk() async throws {
        let project = try await makeProject()
        let total = 160 << 20
        let head = CraftedELF.valid(buildID: Array(repeating: 0x5a, count: 20))
        let spool = DebugFileSpool.uploadDirectory
        // The body's 160 MiB may take a loaded machine longer than the default 30 s.
        try await hostileLiveApp(TestEnvironment.configuration { $0.readTimeout = .seconds(600) }) { client, port in
            let socket = try HostileSocket(port: port)
            #expect(
                socket.send(
                    "POST /v1/projects/\(project.project)/debug-files?name=big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        + "Authorization: Bearer \(project.readToken)\r\nContent-Length: \(total)\r\n\r\n"))
            let filler = [UInt8](repeating: 0xee, count: 1 << 20)
            var sent = socket.send(head + filler[..<((1 << 20) - head.count)])
            for _ in 1..<100 where sent { sent = socket.send(filler) }
            try #require(sent, "the first 100 MiB were taken")
            // 100 MiB sent: on disk, not in memory.
            var spooled = 0
            for _ in 0..<500 where spooled < 99 << 20 {
                try await Task.sleep(for: .milliseconds(20))
                let names = (try? FileManager.default.contentsOfDirectory(atPath: spool.path)) ?? []
                spooled =
                    names.compactMap { name in
                        (try? FileManager.default.attributesOfItem(atPath: spool.appendingPathComponent(name).path)[.size] as? Int) ?? nil
                    }.max() ?? 0
            }
            #expect(spooled >= 99 << 20, "the spool file holds what was sent")
            let metrics = String(buffer: try await client.execute(uri: "/metrics", method: .get).body)
            let inFlight = metrics.split(separator: "\n").first { $0.hasPrefix("crashguard_ingest_body_bytes_in_flight") }
                .flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
            #expect(try #require(inFlight) <= Double(3 << 20), "the budget holds what is in memory only")
            for _ in 100..<160 where sent { sent = socket.send(filler) }
            #expect(sent)
            let response = await socket.readResponse(timeout: 120)
            #expect(response?.status == 201, "\(response?.body ?? "no answer")")
        }
        try await withTestDatabase { db in
            let rows = try await db.client.query(
                """
                SELECT d.project_id, d.build_id, d.sha256, d.size,
                       (SELECT count(*)::bigint FROM debug_file_chunks c WHERE c.project_id = d.project_id AND c.build_id = d.build_id)
                FROM debug_files d JOIN projects p ON p.id = d.project_id WHERE p.slug = \(project.project)
                """, logger: TestEnvironment.logger)
            var found = false
            for try await (projectID, buildID, sha, size, chunks) in rows.decode((Int64, String, String, Int64, Int64).self) {
                found = true
                #expect(size == Int64(total))
                #expect(chunks == 160)
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("copies-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: directory) }
                let cache = DebugFileCache(directory: directory, maxBytes: 1 << 30, logger: TestEnvironment.logger)
                let info = DebugFileInfo(
                    buildId: buildID, kind: "elf", name: "big", size: size, sha256: sha, hasDebugInfo: false, hasSymbols: false,
                    uploadedAt: Date())
                let copy = try await cache.file(project: projectID, info: info, store: PostgresDebugFileStore(database: db))
                #expect((try FileManager.default.attributesOfItem(atPath: copy.path)[.size] as? Int) == total)
            }
            #expect(found)
            _ = try await db.client.query("DELETE FROM projects WHERE slug = \(project.project)", logger: TestEnvironment.logger)
        }
    }
}
