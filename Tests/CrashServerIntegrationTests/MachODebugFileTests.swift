import CrashDebugFiles
import Foundation
import Testing
@testable import CrashServerTestSupport

/// The Mach-O reader on the real binaries of Tests/Fixtures/apple/debug-files (made by its
/// make-fixtures script with clang, ld64.lld, dsymutil and llvm-lipo) and on hostile headers.
@Suite struct MachODebugFileTests {
    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/debug-files/\(name)")))
    }

    static let arm64UUID = "4c4c4480-5555-3144-a123-46faaaed6c55"
    static let x86UUID = "4c4c449b-5555-3144-a1ad-85aa0dbff185"

    @Test func thinExecutable() throws {
        let bytes = try Self.fixture("Crashy-arm64")
        let file = try MachODebugFile(parsing: bytes)
        #expect(
            file.slices == [
                .init(
                    debugID: Self.arm64UUID, arch: "arm64", offset: 0, size: bytes.count, textAddress: 0x1_0000_0000,
                    hasDebugInfo: false, hasSymbols: true)
            ])
    }

    @Test func fatFileHasOneSlicePerArchitecture() throws {
        let bytes = try Self.fixture("Crashy-fat")
        let file = try MachODebugFile(parsing: bytes)
        #expect(Set(file.slices.map(\.arch)) == ["arm64", "x86_64"])
        #expect(Set(file.slices.map(\.debugID)) == [Self.arm64UUID, Self.x86UUID])
        // Each slice is the thin file lipo put in.
        for slice in file.slices {
            let thin = try Self.fixture("Crashy-\(slice.arch)")
            #expect(Array(bytes[slice.offset..<slice.offset + slice.size]) == thin)
        }
    }

    @Test func fatArch64AndLittleEndianFatHeaders() throws {
        let arm = try Self.fixture("Crashy-arm64")
        let x86 = try Self.fixture("Crashy-x86_64")
        for little in [false, true] {
            // fat_arch_64: magic, count, then {cputype, subtype, offset u64, size u64, align, reserved}.
            func put32(_ value: UInt32, _ out: inout [UInt8]) {
                let v = little ? value.littleEndian : value.bigEndian
                withUnsafeBytes(of: v) { out.append(contentsOf: $0) }
            }
            func put64(_ value: UInt64, _ out: inout [UInt8]) {
                let v = little ? value.littleEndian : value.bigEndian
                withUnsafeBytes(of: v) { out.append(contentsOf: $0) }
            }
            var file: [UInt8] = []
            put32(0xcafe_babf, &file)
            put32(2, &file)
            let first = 0x1000
            let second = first + ((arm.count + 0xfff) & ~0xfff)
            for (cpu, offset, size) in [(UInt32(0x0100_000c), first, arm.count), (0x0100_0007, second, x86.count)] {
                put32(cpu, &file)
                put32(cpu == 0x0100_000c ? 0 : 3, &file)
                put64(UInt64(offset), &file)
                put64(UInt64(size), &file)
                put32(12, &file)
                put32(0, &file)
            }
            file += [UInt8](repeating: 0, count: first - file.count) + arm
            file += [UInt8](repeating: 0, count: second - file.count) + x86
            let parsed = try MachODebugFile(parsing: file)
            #expect(parsed.slices.map(\.debugID) == [Self.arm64UUID, Self.x86UUID])
            #expect(parsed.slices.map(\.offset) == [first, second])
        }
    }

    @Test func dsymDWARFCompanionHasDebugInfo() throws {
        let zip = try Self.fixture("Crashy.dSYM.zip")
        let archive = try ZipDirectory(parsing: zip)
        let dwarf = archive.entries.filter(\.isDSYMDWARF)
        #expect(dwarf.map(\.name) == ["Crashy.dSYM/Contents/Resources/DWARF/Crashy"])
    }

    @Test func archNames() {
        #expect(MachODebugFile.archName(cpuType: 0x0100_000c, subtype: 2) == "arm64e")
        #expect(MachODebugFile.archName(cpuType: 0x0100_000c, subtype: 0x8000_0002) == "arm64e")
        #expect(MachODebugFile.archName(cpuType: 0x0100_0007, subtype: 3) == "x86_64")
        #expect(MachODebugFile.archName(cpuType: 12, subtype: 11) == "armv7s")
        #expect(MachODebugFile.archName(cpuType: 0x0200_000c, subtype: 1) == "arm64_32")
    }

    @Test func hostileHeadersAreRefused() throws {
        let arm = try Self.fixture("Crashy-arm64")
        #expect(throws: MachODebugFile.Error.notMachO) { try MachODebugFile(parsing: Array("hello world".utf8)) }
        // Every truncation of a real file is refused or read within its bytes, never past them.
        for cut in stride(from: 0, to: 4096, by: 7) {
            _ = try? MachODebugFile(parsing: Array(arm.prefix(cut)))
        }
        #expect(throws: MachODebugFile.Error.truncated) { try MachODebugFile(parsing: Array(arm.prefix(100))) }
        // sizeofcmds past the end of the file.
        var big = arm
        big[20] = 0xff
        big[21] = 0xff
        big[22] = 0xff
        big[23] = 0x7f
        #expect(throws: MachODebugFile.Error.truncated) { try MachODebugFile(parsing: big) }
        // A load command of size 0 (would loop in place).
        var zero = arm
        zero[36] = 0
        zero[37] = 0
        zero[38] = 0
        zero[39] = 0
        #expect(throws: MachODebugFile.Error.truncated) { try MachODebugFile(parsing: zero) }
        // No LC_UUID: the command renamed.
        var noUUID = arm
        var at = 32
        for _ in 0..<Int(UInt32(littleEndian: arm[16..<20].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) })) {
            let cmd = arm[at..<at + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
            let size = Int(arm[at + 4..<at + 8].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) })
            if cmd == 0x1b { noUUID[at] = 0x7f }
            at += size
        }
        #expect(throws: MachODebugFile.Error.noUUID) { try MachODebugFile(parsing: noUUID) }
        // Fat: overlapping slices, too many, slices past the end, the same UUID twice.
        let fat = try Self.fixture("Crashy-fat")
        var overlap = fat
        overlap.replaceSubrange(8 + 20 + 8..<8 + 20 + 12, with: overlap[8 + 8..<8 + 12])
        #expect(throws: MachODebugFile.Error.overlappingArchitectures) { try MachODebugFile(parsing: overlap) }
        var many = fat
        many[4...7] = [0, 0, 0, 39]
        #expect(throws: MachODebugFile.Error.tooManyArchitectures) { try MachODebugFile(parsing: many) }
        var java = fat
        java[4...7] = [0, 0, 0, 52]
        #expect(throws: MachODebugFile.Error.notMachO) { try MachODebugFile(parsing: java) }
        var past = fat
        past[8 + 12..<8 + 16] = [0x7f, 0xff, 0xff, 0xff]
        #expect(throws: MachODebugFile.Error.truncated) { try MachODebugFile(parsing: past) }
    }
}
