import CrashWire
import Foundation

extension Report {
    /// The report cut to the contract's limits, so a long guard message or a deep stack
    /// never costs the whole report: reason, frames and context values truncated at a
    /// character boundary, frames after the 256th and context entries after the 64th
    /// (by key order) left out, NUL characters removed, an empty reason named.
    func clampedToLimits() -> Report {
        var report = self
        report.reason = Self.clamp(reason, ReportLimits.reasonBytes.upperBound)
        if report.reason.isEmpty { report.reason = "(no reason)" }
        if let stack {
            report.stack = stack.prefix(ReportLimits.maxFrames).map { Self.clamp($0, ReportLimits.frameBytes) }
        }
        if let context {
            var clamped: [String: String] = [:]
            for key in context.keys.sorted() where clamped.count < ReportLimits.maxContextEntries {
                let k = Self.clamp(key, ReportLimits.contextKeyBytes)
                clamped[k] = Self.clamp(context[key] ?? "", ReportLimits.contextValueBytes)
            }
            report.context = clamped
        }
        if let fingerprint {
            let parts = fingerprint.prefix(ReportLimits.fingerprintParts.upperBound)
                .map { Self.clamp($0, ReportLimits.fingerprintPartBytes) }
            report.fingerprint = parts.isEmpty ? nil : Array(parts)
        }
        if let device {
            report.device = DeviceInfo(
                os: device.os.map { Self.clamp($0, ReportLimits.deviceFieldBytes) },
                osVersion: device.osVersion.map { Self.clamp($0, ReportLimits.deviceFieldBytes) },
                model: device.model.map { Self.clamp($0, ReportLimits.deviceFieldBytes) },
                id: device.id.map { Self.clamp($0, ReportLimits.deviceFieldBytes) }
            )
        }
        return report
    }

    /// At most `maxBytes` UTF-8 bytes, cut at a character boundary, without NULs.
    static func clamp(_ text: String, _ maxBytes: Int) -> String {
        var text = text
        if text.utf8.contains(0) { text = text.replacingOccurrences(of: "\u{0}", with: "") }
        guard text.utf8.count > maxBytes else { return text }
        var result = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            if used + size > maxBytes { break }
            result.append(character)
            used += size
        }
        return result
    }
}
