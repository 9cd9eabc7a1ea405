import CrashDebugFiles
import FuzzDriver

/// libFuzzer entry for the Mach-O and zip readers (CrashDebugFiles) every Apple debug-file
/// upload goes through: the input is the file. Findings: crashes, sanitizer reports (a read
/// past the bytes given), runs over libFuzzer's timeout (work that grows faster than the file)
/// and broken invariants: every slice lies within the file, slices do not overlap, debug ids
/// are lower-case UUIDs, zip entries' data lies within the archive, and the same bytes always
/// read the same. The corpus (Fuzz/Corpus/FuzzMachO) starts from the real fixtures of
/// Tests/Fixtures/apple/debug-files.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMachO(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    let first = Result { () throws(MachODebugFile.Error) in try MachODebugFile(parsing: bytes) }
    let again = Result { () throws(MachODebugFile.Error) in try MachODebugFile(parsing: Array(bytes)) }
    precondition(first == again, "the same bytes read differently")
    if case .success(let file) = first {
        var end = 0
        for slice in file.slices.sorted(by: { $0.offset < $1.offset }) {
            precondition(slice.offset >= end && slice.size > 0 && slice.offset + slice.size <= size, "a slice outside the file")
            end = slice.offset + slice.size
            precondition(slice.debugID.utf8.count == 36 && slice.debugID == slice.debugID.lowercased(), "debug id out of form")
        }
    }
    if let zip = try? ZipDirectory(parsing: bytes) {
        for entry in zip.entries {
            precondition(entry.dataOffset >= 0 && entry.dataOffset + entry.compressedSize <= size, "zip data outside the file")
        }
    }
    return 0
}

// SwiftPM renames this executable's main to FuzzMachO_main: run libFuzzer's driver from it.
@_cdecl("FuzzMachO_main")
public func fuzzMachOMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzMachO(data, size)
    }
}
