import CrashDebugFiles
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

@Suite struct ELFHostileHeaderTests {
    /// Parses `bytes`, with how long it took.
    func parse(_ bytes: [UInt8]) -> (result: Result<ELFDebugFile, ELFDebugFile.Error>, seconds: Double) {
        let start = ContinuousClock.now
        let result = Result { () throws(ELFDebugFile.Error) in try ELFDebugFile(parsing: bytes) }
        let elapsed = ContinuousClock.now - start
        return (result, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// 65,534 note headers over one region of many notes (no build id among them): the
    /// finding's file, refused for its header count without reading the region even once.
    @Test func refusesTheManyNoteHeadersFileAtOnce() {
        var elf = CraftedELF()
        let notes = (0..<4096).flatMap { _ in CraftedELF.note(type: 1, descriptor: [0, 0, 0, 0]) }
        let at = elf.append(notes)
        elf.programHeaders = Array(repeating: .init(type: 4, offset: at, size: UInt64(notes.count)), count: 65_534)
        let (result, seconds) = parse(elf.build())
        #expect(throws: ELFDebugFile.Error.tooManyHeaders) { try result.get() }
        #expect(seconds < 2)
    }

    /// Within the header limit, many headers naming one region are refused as overlapping;
    /// many distinct regions are each read once, in time linear in the file.
    @Test func readsEachNoteRegionOnce() {
        var elf = CraftedELF()
        let notes = (0..<2048).flatMap { _ in CraftedELF.note(type: 1, descriptor: [0, 0, 0, 0]) }
        let at = elf.append(notes)
        elf.programHeaders = Array(repeating: .init(type: 4, offset: at, size: UInt64(notes.count)), count: 4096)
        let (shared, sharedSeconds) = parse(elf.build())
        #expect(throws: ELFDebugFile.Error.overlappingNotes) { try shared.get() }
        #expect(sharedSeconds < 2)

        var distinct = CraftedELF()
        var headers: [CraftedELF.Header] = []
        for i in 0..<4096 {
            let note = i == 4095 ? CraftedELF.buildIDNote(Array(0..<20)) : CraftedELF.note(type: 1, descriptor: [0, 0, 0, 0])
            headers.append(.init(type: 4, offset: distinct.append(note), size: UInt64(note.count)))
        }
        distinct.programHeaders = headers
        let (parsed, seconds) = parse(distinct.build())
        #expect((try? parsed.get())?.buildID == Array(0..<20).map { String(format: "%02x", $0) }.joined())
        #expect(seconds < 2)
    }

    /// `e_phnum` 0xffff (`PN_XNUM`) and `e_shnum` 0 take their counts from section 0; the
    /// limit applies to the real count. A small count given that way is read.
    @Test func countsHeldInSectionZeroAreLimitedToo() throws {
        func file(phnum: UInt16?, shnum: UInt16?, sectionZeroInfo: UInt32, sectionZeroSize: UInt64) -> [UInt8] {
            var elf = CraftedELF()
            let note = CraftedELF.buildIDNote(Array(0..<20))
            let at = elf.append(note)
            elf.programHeaders = [.init(type: 4, offset: at, size: UInt64(note.count))]
            elf.sectionHeaders = [.init(type: 0, offset: 0, size: sectionZeroSize, info: sectionZeroInfo)]
            elf.phnumField = phnum
            elf.shnumField = shnum
            return elf.build()
        }
        #expect(throws: ELFDebugFile.Error.tooManyHeaders) {
            try ELFDebugFile(parsing: file(phnum: 0xffff, shnum: nil, sectionZeroInfo: 65_534, sectionZeroSize: 0))
        }
        #expect(throws: ELFDebugFile.Error.tooManyHeaders) {
            try ELFDebugFile(parsing: file(phnum: nil, shnum: 0, sectionZeroInfo: 0, sectionZeroSize: 100_000))
        }
        #expect(throws: ELFDebugFile.Error.tooManyHeaders) {
            try ELFDebugFile(parsing: file(phnum: nil, shnum: 0xffff, sectionZeroInfo: 0, sectionZeroSize: 0))
        }
        #expect(throws: ELFDebugFile.Error.tooManyHeaders) {
            try ELFDebugFile(parsing: file(phnum: 4097, shnum: nil, sectionZeroInfo: 0, sectionZeroSize: 0))
        }
        // PN_XNUM with the real count, 1, in sh_info: the note segment is found.
        let small = try ELFDebugFile(parsing: file(phnum: 0xffff, shnum: nil, sectionZeroInfo: 1, sectionZeroSize: 0))
        #expect(small.buildID.count == 40)
    }

    /// A 1 MB build id is refused quickly (it was a 500 after building strings of it), as is
    /// one of 65 bytes; 64 is the longest taken.
    @Test func refusesBuildIDsOver64Bytes() throws {
        let (huge, seconds) = parse(CraftedELF.valid(buildID: [UInt8](repeating: 0xab, count: 1 << 20)))
        #expect(throws: ELFDebugFile.Error.badBuildID) { try huge.get() }
        #expect(seconds < 2)
        #expect(throws: ELFDebugFile.Error.badBuildID) { try ELFDebugFile(parsing: CraftedELF.valid(buildID: Array(repeating: 1, count: 65))) }
        #expect(throws: ELFDebugFile.Error.badBuildID) { try ELFDebugFile(parsing: CraftedELF.valid(buildID: [7])) }
        #expect(try ELFDebugFile(parsing: CraftedELF.valid(buildID: Array(repeating: 0xcd, count: 64))).buildID.count == 128)
    }

    /// A note whose header, name or descriptor runs past its region is refused.
    @Test func refusesNotesThatRunPastTheirRegion() {
        func file(_ note: [UInt8], regionSize: Int? = nil) -> [UInt8] {
            var elf = CraftedELF()
            let id = CraftedELF.buildIDNote(Array(0..<20))
            let at = elf.append(id + note)
            elf.programHeaders = [.init(type: 4, offset: at, size: UInt64(regionSize ?? (id.count + note.count)))]
            elf.append([UInt8](repeating: 0, count: 4096))
            return elf.build()
        }
        let descriptorPast = CraftedELF.note(type: 1, descriptor: [1, 2, 3, 4], descSize: 4096)
        let namePast = CraftedELF.note(type: 1, descriptor: [1, 2, 3, 4], nameSize: 100_000)
        let headerPast = [UInt8](repeating: 0, count: 5)
        for bytes in [file(descriptorPast), file(namePast), file(headerPast)] {
            #expect(throws: ELFDebugFile.Error.noteOutOfBounds) { try ELFDebugFile(parsing: bytes) }
        }
    }

    /// Two note segments, or two note sections, sharing bytes are refused; a note section
    /// inside the note segment (as linkers write them) is not.
    @Test func refusesOverlappingNoteRegions() throws {
        var elf = CraftedELF()
        let note = CraftedELF.buildIDNote(Array(0..<20))
        let second = CraftedELF.note(type: 1, descriptor: [0, 0, 0, 0])
        let at = elf.append(note + second)
        let both = UInt64(note.count + second.count)
        elf.programHeaders = [.init(type: 4, offset: at, size: both), .init(type: 4, offset: at + 16, size: 16)]
        #expect(throws: ELFDebugFile.Error.overlappingNotes) { try ELFDebugFile(parsing: elf.build()) }
        elf.programHeaders = []
        elf.sectionHeaders = [
            .init(type: 0, offset: 0, size: 0), .init(type: 7, offset: at, size: UInt64(note.count)), .init(type: 7, offset: at, size: 16),
        ]
        #expect(throws: ELFDebugFile.Error.overlappingNotes) { try ELFDebugFile(parsing: elf.build()) }
        elf.programHeaders = [.init(type: 4, offset: at, size: both)]
        elf.sectionHeaders = [.init(type: 0, offset: 0, size: 0), .init(type: 7, offset: at, size: UInt64(note.count))]
        #expect(try ELFDebugFile(parsing: elf.build()).buildID.count == 40)
    }

    /// A note section whose offset plus size does not fit 64 bits (a fuzzing finding, kept in
    /// Fuzz/Corpus/FuzzELF) lies outside the file: nothing to read, no trap.
    @Test func noteRegionsPastSixtyFourBitsAreOutsideTheFile() throws {
        var elf = CraftedELF()
        let note = CraftedELF.buildIDNote(Array(0..<20))
        let at = elf.append(note)
        elf.programHeaders = [.init(type: 4, offset: at, size: UInt64(note.count))]
        elf.sectionHeaders = [.init(type: 0, offset: 0, size: 0), .init(type: 7, offset: .max - 8, size: 256)]
        #expect(try ELFDebugFile(parsing: elf.build()).buildID.count == 40)
    }

    /// What linkers and Debian ship is read: every ELF file of /usr/bin parses or is refused
    /// only for having no build id (never for the limits above).
    @Test func readsTheSystemsOwnFiles() throws {
        var read = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: "/usr/bin").sorted().prefix(400) {
            guard let data = FileManager.default.contents(atPath: "/usr/bin/" + name), data.starts(with: [0x7f, 0x45, 0x4c, 0x46]) else {
                continue
            }
            do {
                _ = try ELFDebugFile(parsing: data)
                read += 1
            } catch {
                #expect(error == .noBuildID, "\(name): \(error)")
            }
        }
        #expect(read > 10)
    }
}
