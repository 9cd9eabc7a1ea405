import CrashDebugFiles
import Foundation
import Logging
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// A tiny C program built with DWARF for the symbolizer tests, with a fixed build id.
struct DebugFixture {
    static let buildID = "0123456789abcdef0123456789abcdef01234567"
    static let source = """
        static inline __attribute__((always_inline)) int inner(int x) {
            return x * 3 + (x > 7 ? 1 : 2);
        }
        __attribute__((noinline)) int outer(int x) {
            int y = inner(x);
            return y + 2;
        }
        int main(int argc, char **argv) { return outer(argc); }
        """

    let directory: URL
    var binary: URL { directory.appendingPathComponent("fixture") }
    var stripped: URL { directory.appendingPathComponent("fixture.stripped") }
    var debugOnly: URL { directory.appendingPathComponent("fixture.debug") }
    var noBuildID: URL { directory.appendingPathComponent("fixture.noid") }
    var source: URL { directory.appendingPathComponent("fixture.c") }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("symbolication-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Self.source.write(to: source, atomically: true, encoding: .utf8)
        let compiler = ["clang", "gcc", "cc"].first { Self.which($0) != nil }.flatMap(Self.which) ?? "cc"
        try Self.run(compiler, ["-g", "-O2", "-Wl,--build-id=0x\(Self.buildID)", "-o", binary.path, source.path])
        try Self.run(compiler, ["-g", "-O2", "-Wl,--build-id=none", "-o", noBuildID.path, source.path])
        try Self.run(Self.which("strip") ?? "strip", ["-o", stripped.path, binary.path])
        try Self.run(Self.which("objcopy") ?? "objcopy", ["--only-keep-debug", binary.path, debugOnly.path])
    }

    /// `outer`'s address and size in the binary (`nm -S`).
    func outer() throws -> (address: UInt64, size: UInt64) {
        let text = try Self.run(Self.which("nm") ?? "nm", ["-S", binary.path])
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 4, parts[3] == "outer", let address = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16) {
                return (address, size)
            }
        }
        throw FixtureError(message: "no outer in nm output")
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    struct FixtureError: Error { var message: String }

    static func which(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureError(message: "\(executable) \(arguments) exited \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }
}

@Suite struct ELFDebugFileTests {
    @Test func readsBuildIDLoadAddressAndDebugInfo() throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let full = try ELFDebugFile(parsing: try Data(contentsOf: fixture.binary))
        #expect(full.buildID == DebugFixture.buildID)
        #expect(full.hasDebugInfo && full.hasSymbols)
        let stripped = try ELFDebugFile(parsing: try Data(contentsOf: fixture.stripped))
        #expect(stripped.buildID == DebugFixture.buildID)
        #expect(!stripped.hasDebugInfo && !stripped.hasSymbols)
        #expect(stripped.loadAddress == full.loadAddress)
        // The separate debug file: its note segment has no file contents, the section does.
        let debug = try ELFDebugFile(parsing: try Data(contentsOf: fixture.debugOnly))
        #expect(debug.buildID == DebugFixture.buildID)
        #expect(debug.hasDebugInfo)
        #expect(debug.loadAddress == full.loadAddress)
    }

    @Test func refusesWhatIsNotAnELFFileWithABuildID() throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        #expect(throws: ELFDebugFile.Error.notELF) { try ELFDebugFile(parsing: Array("#!/bin/sh\necho hi\n".utf8)) }
        #expect(throws: ELFDebugFile.Error.notELF) { try ELFDebugFile(parsing: [UInt8]()) }
        #expect(throws: ELFDebugFile.Error.noBuildID) { try ELFDebugFile(parsing: try Data(contentsOf: fixture.noBuildID)) }
        // Every truncation of a real file is refused or read within its bytes, never past them.
        let bytes = [UInt8](try Data(contentsOf: fixture.stripped))
        for length in stride(from: 0, to: min(bytes.count, 4096), by: 7) {
            _ = try? ELFDebugFile(parsing: bytes[..<length])
        }
        #expect(throws: ELFDebugFile.Error.truncated) { try ELFDebugFile(parsing: bytes[..<40]) }
    }
}

@Suite(.serialized) struct SymbolizerPoolTests {
    static let symbolizer = ProcessInfo.processInfo.environment["CRASHGUARD_LLVM_SYMBOLIZER"] ?? "/usr/bin/llvm-symbolizer"

    @Test func resolvesFunctionFileLineAndInlinedFrames() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let pool = SymbolizerPool(executable: Self.symbolizer, size: 2, logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let outer = try fixture.outer()
        let addresses = Array(outer.address..<(outer.address + outer.size))
        // Against the separate debug file, as the server does.
        let answers = try await pool.symbolize(file: fixture.debugOnly.path, addresses: addresses)
        #expect(answers.count == addresses.count)
        let first = try #require(answers.first?.last)
        #expect(first.function == "outer")
        #expect(first.file?.hasSuffix("fixture.c") == true)
        #expect(first.line.map { (4...6).contains($0) } == true)
        // Somewhere in outer, `inner` was inlined: innermost first, outer last at line 5.
        let inlined = try #require(answers.first { $0.count == 2 })
        #expect(inlined[0].function == "inner")
        #expect(inlined[0].line.map { (1...3).contains($0) } == true)
        #expect(inlined[1].function == "outer")
        #expect(inlined[1].line == 5)
        // An address in no function, and a file that is not there: no locations, no error.
        #expect(try await pool.symbolize(file: fixture.debugOnly.path, addresses: [1]) == [[]])
        #expect(try await pool.symbolize(file: fixture.directory.appendingPathComponent("missing").path, addresses: [outer.address]) == [[]])
        #expect(await pool.processCount == 1)
    }

    @Test func restartsAProcessThatDied() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let pool = SymbolizerPool(executable: Self.symbolizer, size: 1, logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let outer = try fixture.outer()
        _ = try await pool.symbolize(file: fixture.binary.path, addresses: [outer.address])
        let pid = try #require(await pool.idleProcessIDs.first)
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        // The dead process fails its next request (or is found dead); the one after runs on a new process.
        var answer: [[SymbolizedLocation]]?
        for _ in 0..<2 where answer == nil {
            answer = try? await pool.symbolize(file: fixture.binary.path, addresses: [outer.address])
        }
        #expect(answer?.first?.last?.function == "outer")
        #expect(await pool.processCount == 1)
        #expect(await pool.idleProcessIDs.first != pid)
    }

    @Test func killsAProcessThatDoesNotAnswerAndBoundsTheWaiting() async throws {
        let fixture = try DebugFixture()
        defer { fixture.remove() }
        let hanging = fixture.directory.appendingPathComponent("hanging-symbolizer")
        try "#!/bin/sh\nexec sleep 600\n".write(to: hanging, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: hanging.path)
        let pool = SymbolizerPool(
            executable: hanging.path, size: 1, timeout: .milliseconds(500), maxWaiting: 0, logger: TestEnvironment.logger)
        defer { Task { await pool.shutdown() } }
        let start = ContinuousClock.now
        let first = Task { try await pool.symbolize(file: fixture.binary.path, addresses: [0x1000]) }
        try await Task.sleep(for: .milliseconds(100))
        // The one process is busy and no one may wait: refused at once.
        await #expect(throws: SymbolizerError.busy) { try await pool.symbolize(file: fixture.binary.path, addresses: [0x1000]) }
        await #expect(throws: SymbolizerError.timedOut) { try await first.value }
        #expect(ContinuousClock.now - start < .seconds(30))
        #expect(await pool.processCount == 0)
    }

    @Test func refusesWorkAfterShutdownAndWithoutTheExecutable() async throws {
        let pool = SymbolizerPool(executable: Self.symbolizer, logger: TestEnvironment.logger)
        await pool.shutdown()
        await #expect(throws: SymbolizerError.closed) { try await pool.symbolize(file: "/bin/sh", addresses: [1]) }
        let missing = SymbolizerPool(executable: "/nonexistent/llvm-symbolizer", logger: TestEnvironment.logger)
        await #expect(throws: SymbolizerError.self) { try await missing.symbolize(file: "/bin/sh", addresses: [1]) }
        #expect(await missing.processCount == 0)
    }
}

@Suite struct ReportSymbolicatorTests {
    @Test func findsTheSitesOfFramesInKnownImages() {
        let context = [
            "image.0": "0x5000 4096 \(DebugFixture.buildID) /opt/app/bin/app",
            "image.1": "0x9000 4096 - /lib/libnoid.so",
            "image.2": "0xa000 4096 not-hex /lib/libbad.so",
            "crash.machineryFrames": "2",
        ]
        let stack = [
            "0 app 0x5010 app + 16",
            "1 libnoid.so 0x9010 libnoid.so + 16",
            "2 app 0x6000 app + 4096",  // past the image's end
            "3 ??? 0x5020",
            "4 app 0x5100 main + 4",
        ]
        let sites = ReportSymbolicator.sites(stack: stack, context: context)
        // Frame 0 is a return address too: the crash machinery above it was skipped.
        #expect(sites.map(\.frame) == [0, 4])
        #expect(sites.map(\.offset) == [0xf, 0xff])
        #expect(sites.allSatisfy { $0.image.buildID == DebugFixture.buildID && $0.image.name == "app" })
        // Without skipped machinery, frame 0 is the crashing instruction itself.
        #expect(ReportSymbolicator.sites(stack: ["0 app 0x5010 app + 16"], context: ["image.0": context["image.0"]!]).first?.offset == 0x10)
        #expect(ReportSymbolicator.sites(stack: stack, context: [:]).isEmpty)
    }

    @Test func cacheForgetsTheOldestPastItsCapacity() async {
        let cache = SymbolCache(capacity: 2)
        let location = [SymbolizedLocation(function: "f", file: nil, line: nil, column: nil)]
        for address in UInt64(1)...3 { await cache.set(SymbolCache.Key(sha256: "s", address: address), location) }
        #expect(await cache.get(SymbolCache.Key(sha256: "s", address: 1)) == nil)
        #expect(await cache.get(SymbolCache.Key(sha256: "s", address: 3)) == location)
        #expect(await cache.count == 2)
    }
}
