import CrashGrouping
import CrashWire
import FuzzDriver

/// libFuzzer entry for the v1 normalizer: any UTF-8 text (invalid bytes repaired) as a
/// reason and as a frame. Findings: crashes, sanitizer reports, and broken invariants:
/// normalizing is idempotent, the title is the first line cut at 200 characters, the
/// signature is a 64-digit hex SHA-256 and depends only on the normalized text.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNormalizer(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let normalized = Grouping.normalize(reason: text)
    precondition(Grouping.normalize(reason: normalized) == normalized, "normalize(reason:) is not idempotent for \(text.debugDescription)")
    let frame = Grouping.normalize(frame: text)
    precondition(Grouping.normalize(frame: frame) == frame, "normalize(frame:) is not idempotent for \(text.debugDescription)")
    let title = Grouping.title(normalizedReason: normalized)
    precondition(title.count <= Grouping.titleLimit && !title.contains("\n"), "title too long or multi-line")
    let kind = ReportKind.allCases[Int(size) % ReportKind.allCases.count]
    let signature = Grouping.signature(kind: kind, reason: text, stack: [text, text], fingerprint: nil, version: .v1)
    precondition(signature.hash.utf8.count == 64 && signature.hash.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
    precondition(
        signature == Grouping.signature(kind: kind, reason: normalized, stack: [text, text], fingerprint: nil, version: .v1) || kind == .signal
            || kind == .exception,
        "signature depends on more than the normalized reason")
    // Grouping v2: the same guarantees, and frame selection never traps.
    let reason2 = Grouping.normalize(reason: text, version: .v2)
    precondition(Grouping.normalize(reason: reason2, version: .v2) == reason2, "v2 normalize(reason:) is not idempotent for \(text.debugDescription)")
    let frame2 = Grouping.normalize(frame: text, version: .v2)
    precondition(Grouping.normalize(frame: frame2, version: .v2) == frame2, "v2 normalize(frame:) is not idempotent for \(text.debugDescription)")
    precondition(Grouping.signature(kind: kind, reason: text, stack: [text, text], fingerprint: nil, version: .v2).hash.utf8.count == 64)
    return 0
}

// SwiftPM renames this executable's main to FuzzNormalizer_main: run libFuzzer's driver from it.
@_cdecl("FuzzNormalizer_main")
public func fuzzNormalizerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzNormalizer(data, size)
    }
}
