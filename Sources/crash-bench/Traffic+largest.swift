import CrashCompression
import CrashGrouping
import CrashWire
import Foundation
import SeededRandom

/// The largest valid bodies (issue 13): 1000 reports, each with its fields at their limits
/// (an 8192-byte reason, seven 1024-byte frames, a context value taking the rest), filling
/// the decompressed cap to within 1.5 %, and compressing like real reports, not to nothing:
/// to about 93 % of the compressed cap (a ratio of about 17). Fewer reports fill smaller caps
/// alike (250 reports and 4 MiB: the smoke run's cheap form).
///
/// The long text is what long crash text is made of: demangled generic Swift symbols and
/// `userInfo` dumps, the same words for every occurrence of a bug, with addresses that differ
/// every time. How often an address comes decides the ratio; it is calibrated on a sample
/// before the bodies are made. Addresses are what grouping normalizes away, and the layout
/// of the words does not depend on the rest of the report, so a bug keeps one signature.
/// Normalizing 15 KB of text per report is the expensive part of making a body, so once two
/// reports of a bug agree on their signature it is reused for the bug's other reports; the
/// run's verification (groups == distinct signatures) would show a bug that did not keep it.
extension Traffic {
    /// About what one report at the field limits takes in JSON: `maxDecompressed / reports`
    /// must be at least this for bodies of `reports` reports to stay under the cap.
    static let largestReportBytes = 16_200

    /// `count` such bodies of `reports` reports (the `gzip` of each under `maxCompressed`).
    func largestBodies(count: Int, reports: Int, maxCompressed: Int, maxDecompressed: Int) throws -> [Body] {
        let target = Int(Double(maxDecompressed) * 0.985)
        let compressedTarget = Double(maxCompressed) * 0.93
        // Calibrate on a sample of 50 reports: gzip's window is 32 KB, two reports, so a
        // sample compresses like the whole body.
        var rng = SplitMix64(seed: seed ^ 0x5EED)
        var low = 8.0, high = 4096.0
        for _ in 0..<12 {
            let spacing = (low * high).squareRoot()
            let sample = try largestBody(reports: 50, perReport: target / reports, spacing: Int(spacing), signing: false, rng: &rng)
            let estimate = Double(sample.gzip.count) * Double(reports) / 50
            if estimate > compressedTarget { low = spacing } else { high = spacing }
        }
        var out: [Body] = []
        for _ in 0..<count {
            var spacing = Int(high)
            var body = try largestBody(reports: reports, perReport: target / reports, spacing: spacing, signing: true, rng: &rng)
            guard body.rawBytes <= maxDecompressed else { throw BenchError("a body of \(body.rawBytes) B is over the cap") }
            while body.gzip.count > maxCompressed {
                guard spacing < 65536 else { throw BenchError("cannot make a body under the compressed cap") }
                spacing = spacing * 5 / 4 + 1
                body = try largestBody(reports: reports, perReport: target / reports, spacing: spacing, signing: true, rng: &rng)
            }
            out.append(body)
        }
        return out
    }

    /// One body of `reports` reports of about `perReport` bytes of JSON each; without
    /// `signing`, for calibration, its signatures are left out.
    private func largestBody(reports count: Int, perReport: Int, spacing: Int, signing: Bool, rng: inout SplitMix64) throws -> Body {
        let now = Date()
        var reports: [Report] = []
        var signatures: [String] = []
        // Signatures of bugs whose first two reports agreed; of the others every report is signed.
        var stable: [Int: String] = [:]
        var first: [Int: String] = [:]
        var unstable: Set<Int> = []
        for _ in 0..<count {
            let rank = zipf.sample(&rng)
            var report = makeReport(rank: rank, now: now, rng: &rng)
            let site = UInt64(rank) &* 0x9E37_79B9
            let text = LongText(spacing: spacing)
            report.reason = text.make(
                report.reason + " userInfo: {", length: ReportLimits.reasonBytes.upperBound, reserve: 512, words: site, rng: &rng)
            // Seven frames of 1024 bytes: the bug's own on top, the shared machinery below.
            report.stack = (report.stack ?? []).prefix(7).enumerated().map { index, frame in
                let words = index < 3 ? site &+ UInt64(index) : UInt64(index) &* 7919
                return text.make(frame + " ", length: ReportLimits.frameBytes, reserve: 192, words: words, rng: &rng)
            }
            // The context value takes what is left of the report's share.
            let used = try JSONEncoder.crashWire().encode(report).count
            let left = max(16, min(ReportLimits.contextValueBytes, perReport - used - 20))
            report.context?["userInfo"] = text.make("", length: left, reserve: 0, words: site &+ 99, rng: &rng)
            if signing {
                if let known = stable[rank] {
                    signatures.append(known)
                } else {
                    let signature = Grouping.signature(
                        kind: report.kind, reason: report.reason, stack: report.stack, fingerprint: report.fingerprint,
                        version: .newProjectDefault
                    ).hash
                    signatures.append(signature)
                    if let earlier = first[rank], !unstable.contains(rank) {
                        if earlier == signature { stable[rank] = signature } else { unstable.insert(rank) }
                    } else {
                        first[rank] = signature
                    }
                }
            }
            reports.append(report)
        }
        let json = try JSONEncoder.crashWire().encode(ReportBatch(reports: reports))
        return Body(
            gzip: try Deflater.compress(Array(json), format: .gzip), reports: count, rawBytes: json.count,
            signatures: signatures)
    }
}

/// Words of long crash text, with a fresh address every `spacing` bytes.
///
/// The words and where the addresses go depend only on the seed and `spacing`, and the
/// text is cut at a fixed place, so every occurrence of a bug normalizes alike: what the
/// prefix before it leaves over is trailing spaces, which the normalizer drops.
private struct LongText {
    let spacing: Int

    static let words = [
        "Swift.Array<", "Swift.Dictionary<Swift.String, ", "Swift.Optional<", "Swift.String", "Swift.Int", "Foundation.Data",
        "Foundation.URL", "Demo.", "Model", "Store", "Item", "View", "Controller", "Cell", ">", ", ", "(with: ", ") -> ()",
        "closure #1 in ", "generic specialization <", "protocol witness for ", "merged ", "partial apply for ",
        "reabstraction thunk helper from @escaping @callee_guaranteed ", "NSLocalizedDescription = ", "; ",
        "NSUnderlyingError = ", "Error Domain=NSCocoaErrorDomain ", "async function pointer to ",
        "(extension in Demo):", "Combine.Publishers.Map<", "SwiftUI.ModifiedContent<", "_ViewModifier_Content<",
    ]

    /// `prefix` (at most `reserve` bytes), a phrase of words chosen by the seed `words` (the
    /// same for every occurrence of a bug) repeated, filling `length - reserve` bytes, then
    /// spaces to exactly `length` bytes; every `spacing` bytes of words an address of 12 digits from `rng`.
    func make(_ prefix: String, length: Int, reserve: Int, words seed: UInt64, rng: inout SplitMix64) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(length)
        // A phrase of a dozen words, repeated as long symbols and dumps repeat their parts.
        var chooser = SplitMix64(seed: seed)
        let phrase = (0..<12).map { _ in Self.words[Int(chooser.next() % UInt64(Self.words.count))] }
        var sinceAddress = 0
        var next = 0
        while text.count < length - reserve {
            let word = phrase[next % phrase.count]
            next += 1
            text += word.utf8
            sinceAddress += word.utf8.count
            if sinceAddress >= spacing {
                sinceAddress = 0
                text += " 0x".utf8
                text += String(rng.next() & 0xFFFF_FFFF_FFFF | 0x1000_0000_0000, radix: 16).utf8
                text += " ".utf8
            }
        }
        var out = Array(prefix.utf8.prefix(reserve))
        out += text.prefix(length - reserve)
        while out.count < length { out.append(UInt8(ascii: " ")) }
        return String(decoding: out.prefix(length), as: UTF8.self)
    }
}
