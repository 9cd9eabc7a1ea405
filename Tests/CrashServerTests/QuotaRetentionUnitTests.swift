import CrashIngest
import CrashWire
import Foundation
import Testing

@testable import CrashServer

/// The pure parts of data-protection.md's "Daily quota" and "Retention": `Retry-After` to the
/// next UTC midnight, and which reports a retention turns away on arrival.
@Suite("Quota and retention rules")
struct QuotaRetentionUnitTests {
    static let midnight = Date(timeIntervalSince1970: 1_764_288_000)  // 2025-11-28T00:00:00Z

    @Test("Retry-After is the whole seconds to the next UTC midnight, at least 1")
    func retryAfter() {
        #expect(QuotaExceeded.secondsToMidnight(after: Self.midnight) == 86_400)
        #expect(QuotaExceeded.secondsToMidnight(after: Self.midnight.addingTimeInterval(12 * 3600)) == 43_200)
        #expect(QuotaExceeded.secondsToMidnight(after: Self.midnight.addingTimeInterval(86_399)) == 1)
        #expect(QuotaExceeded.secondsToMidnight(after: Self.midnight.addingTimeInterval(86_399.75)) == 1)
        #expect(QuotaExceeded.secondsToMidnight(after: Self.midnight.addingTimeInterval(0.5)) == 86_400)
        let refusal = QuotaExceeded(remaining: 3, now: Self.midnight.addingTimeInterval(86_000))
        #expect(refusal.retryAfter == 400)
        #expect(refusal.sentryRateLimits == "400:error:project:quota_exceeded")
        #expect(refusal.message.contains("quota"))
    }

    @Test("a retention under 30 days rejects older reports naming timestamp, in body order; 30 or more leaves validation alone")
    func arrival() throws {
        let now = Self.midnight
        let times = [-8.0, -6, -7.5, 0].map { now.addingTimeInterval($0 * 86_400) }
        let body = Array(
            try JSONSerialization.data(withJSONObject: [
                "reports": times.map {
                    [
                        "id": UUID().uuidString, "timestamp": RFC3339.format($0), "kind": "custom", "reason": "r",
                        "app": ["id": "a", "version": "1"],
                    ] as [String: Any]
                }
            ]))
        let batch = try IngestBodyReader.read(body, contentEncoding: nil, now: now)
        #expect(batch.accepted.count == 4)
        let seven = batch.rejectingPastRetention(retentionDays: 7, now: now)
        #expect(seven.accepted.map(\.index) == [1, 3])
        #expect(seven.rejected.map(\.index) == [0, 2])
        #expect(seven.rejected.allSatisfy { $0.error == "timestamp: older than the project's retention of 7 days" })
        #expect(batch.rejectingPastRetention(retentionDays: 30, now: now).accepted.count == 4)
        #expect(Retention(days: 7).cutoff(now: now.addingTimeInterval(5400)) == now.addingTimeInterval(-7 * 86_400 + 3600))
    }
}
