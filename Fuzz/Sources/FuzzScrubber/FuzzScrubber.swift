import CrashIngest
import FuzzDriver

/// libFuzzer entry for the report scrubber: any UTF-8 text (invalid bytes repaired), scrubbed with
/// the defaults and with every optional rule on. Findings: crashes, sanitizer reports, and broken
/// invariants: scrubbing is idempotent, and what comes out holds no Luhn-valid card number.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzScrubber(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    for scrubber in [defaults, everything] {
        let once = scrubber.scrub(text: text)
        precondition(scrubber.scrub(text: once) == once, "scrubbing is not idempotent for \(text.debugDescription)")
        precondition(!ReportScrubber.containsCardNumber(once), "a card number survived in \(once.debugDescription)")
        _ = scrubber.scrub(contextValue: text, key: text)
    }
    return 0
}

private let defaults = ReportScrubber()
private let everything = ReportScrubber(settings: ScrubSettings(scrubIPs: true, scrubEmails: true, sensitiveFields: ["pin"]))

// SwiftPM renames this executable's main to FuzzScrubber_main: run libFuzzer's driver from it.
@_cdecl("FuzzScrubber_main")
public func fuzzScrubberMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzScrubber(data, size)
    }
}
