import FuzzDriver

/// libFuzzer entry for the crash list's search language (`q=`): the server's own
/// SearchQuery.swift (linked here as it is), on any UTF-8 text (invalid bytes repaired).
/// Findings: crashes, sanitizer reports, and broken invariants: parsing is deterministic, a
/// refusal names what is wrong, a text over the limit is always refused, and a parsed query
/// written back (`text`) parses to the same query.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSearchQuery(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let first: SearchQuery
    do {
        first = try SearchQuery.parse(text)
    } catch {
        precondition(!error.message.isEmpty, "a refusal without a message for \(text.debugDescription)")
        precondition((try? SearchQuery.parse(text)) == nil, "the same text parsed on a second try: \(text.debugDescription)")
        return 0
    }
    precondition(text.utf8.count <= SearchQuery.maxBytes, "a text over the limit was read")
    precondition((try? SearchQuery.parse(text)) == first, "parsing is not deterministic for \(text.debugDescription)")
    let written = first.text
    guard let again = try? SearchQuery.parse(written) else {
        // A query written back may pass the byte limit (quotes and escapes added); nothing else refuses it.
        precondition(written.utf8.count > SearchQuery.maxBytes, "\(written.debugDescription) (from \(text.debugDescription)) does not parse")
        return 0
    }
    precondition(again == first, "\(text.debugDescription) written back as \(written.debugDescription) reads differently")
    return 0
}

// SwiftPM renames this executable's main to FuzzSearchQuery_main: run libFuzzer's driver from it.
@_cdecl("FuzzSearchQuery_main")
public func fuzzSearchQueryMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzSearchQuery(data, size)
    }
}
