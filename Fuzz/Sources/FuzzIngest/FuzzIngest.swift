import CrashCompression
import CrashIngest
import Foundation
import FuzzDriver

/// libFuzzer entry for the server's ingest pipeline (CrashIngest): the first byte picks the
/// encoding (identity, gzip, deflate, or the input gzip-compressed first, so the fuzzer
/// reaches the streaming JSON reader through inflate); the rest is the body. Crashes,
/// sanitizer reports and the pipeline's own preconditions (rejections name a field,
/// signatures are SHA-256, titles are cut, every report accounted for) are findings, as is
/// a body that gets a different verdict whole and fed one byte at a time.
/// The decompressed cap is 1 MiB here so that inflate bombs stay cheap.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzIngest(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let body = Array(bytes.dropFirst())
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let outcome: IngestDecoding.Outcome
    switch bytes[0] % 4 {
    case 0: outcome = IngestDecoding.evaluate(body, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
    case 1: outcome = IngestDecoding.evaluate(body, encoding: "gzip", maxDecompressedBytes: 1 << 20, now: now)
    case 2: outcome = IngestDecoding.evaluate(body, encoding: "deflate", maxDecompressedBytes: 1 << 20, now: now)
    default:
        let packed = (try? Deflater.compress(body, format: .gzip)) ?? []
        outcome = IngestDecoding.evaluate(packed, encoding: "gzip", maxDecompressedBytes: 1 << 20, now: now)
        // Identity and gzip of the same bytes must agree.
        let plain = IngestDecoding.evaluate(body, encoding: nil, maxDecompressedBytes: 1 << 20, now: now)
        if plain != outcome && !body.isEmpty {
            // Release builds drop precondition messages: say what differed before stopping.
            FileHandle.standardError.write(Data("gzip and identity disagree: \(plain) vs \(outcome)\n".utf8))
            preconditionFailure("gzip and identity disagree")
        }
    }
    if bytes[0] % 4 == 0 {
        // Chunk boundaries must not matter: the same body fed byte by byte.
        let stepwise = feedBytewise(body, now: now)
        if stepwise != outcome {
            FileHandle.standardError.write(Data("whole and bytewise disagree: \(outcome) vs \(stepwise)\n".utf8))
            preconditionFailure("whole and bytewise disagree")
        }
    }
    precondition([202, 400, 413].contains(outcome.status), "unexpected status \(outcome.status): \(outcome.error ?? "")")
    precondition(outcome.status == 202 || outcome.error?.isEmpty == false, "an error names the problem")
    return 0
}

private func feedBytewise(_ body: [UInt8], now: Date) -> IngestDecoding.Outcome {
    do {
        let reader = try IngestBodyReader(contentEncoding: nil, maxBodyBytes: .max, maxDecompressedBytes: 1 << 20)
        for byte in body { try reader.feed([byte]) }
        let batch = try reader.finish(now: now, version: .newProjectDefault)
        return IngestDecoding.Outcome(status: 202, valid: batch.accepted.count, rejected: batch.rejected.count, error: nil)
    } catch {
        return IngestDecoding.Outcome(status: error.status, valid: 0, rejected: 0, error: error.message)
    }
}

// SwiftPM renames this executable's main to FuzzIngest_main: run libFuzzer's driver from it.
@_cdecl("FuzzIngest_main")
public func fuzzIngestMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runLibFuzzer(argc, argv) { data, size in
        guard let data else { return 0 }
        return fuzzIngest(data, size)
    }
}
