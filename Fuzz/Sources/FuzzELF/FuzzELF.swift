import CrashDebugFiles
import FuzzDriver

/// libFuzzer entry for the ELF debug-file reader (CrashDebugFiles), the code every upload and
/// every symbolizer copy goes through: the input is the file. Findings: crashes, sanitizer
/// reports (a read past the bytes given), runs over libFuzzer's timeout (work that grows faster
/// than the file), and broken invariants: a file read has a build id of 2 to 64 bytes in
/// lowercase hex, its patches lie within the file, and the same bytes always read the same.
/// The corpus (Fuzz/Corpus/FuzzELF) holds the hostile shapes of issue 41: huge and 0xffff
/// header counts with the count in section 0, overlapping and truncated notes, oversized
/// build ids, many notes in one region, debug links and split-DWARF abbreviations.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzELF(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    let first = Result { () throws(ELFDebugFile.Error) in try ELFDebugFile(parsing: bytes) }
    let again = Result { () throws(ELFDebugFile.Error) in try ELFDebugFile(parsing: Array(bytes)) }
    precondition(first == again, "the same bytes read differently")
    guard case .success(let file) = first else { return 0 }
    precondition(ELFDebugFile.isBuildID(file.buildID), "build id \(file.buildID) out of form")
    var patched = Array(bytes)
    for patch in file.lookupPatches {
        precondition(patch.offset >= 0 && patch.offset + patch.bytes.count <= size, "a patch outside the file")
        patched.replaceSubrange(patch.offset..<(patch.offset + patch.bytes.count), with: patch.bytes)
    }
    // The check the server makes on its copy: it must not trap, whatever the patches overlap.
    _ = patched.withUnsafeBytes { try? ELFDebugFile.remainingLookups(in: $0) }
    return 0
}

// SwiftPM renames this executable's main to FuzzELF_main: run libFuzzer's driver from it.
@_cdecl("FuzzELF_main")
public func fuzzELFMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzELF(data, size)
    }
}
