import Foundation

/// The release-health items of an envelope (release-health.md, "Doors"): `session` (one
/// update) and `sessions` (aggregates). An invalid item is dropped silently, as Sentry's Relay
/// does; the rest of the envelope still counts.
struct SentrySessions: Sendable {
    var updates: [SessionUpdate] = []
    var aggregates: [SessionAggregate] = []
    /// `session` and `sessions` items in the envelope, valid or not.
    var items = 0
    /// Items dropped as invalid.
    var dropped = 0
}

extension SentryEnvelope {
    static func sessions(in items: [Item], now: Date) -> SentrySessions {
        var out = SentrySessions()
        for item in items where item.type == "session" || item.type == "sessions" {
            out.items += 1
            guard JSONDepth.within(item.payload, limit: JSONDepth.maxDepth, maxValues: JSONDepth.maxItemValues),
                let json = SessionJSON.decode(item.payload)
            else {
                out.dropped += 1
                continue
            }
            if item.type == "session" {
                switch SessionUpdate.parse(json, now: now, requireSID: false) {
                case .success(let update): out.updates.append(update)
                case .failure: out.dropped += 1
                }
            } else {
                let aggregates = SessionAggregate.parse(json, now: now)
                if aggregates.isEmpty { out.dropped += 1 }
                out.aggregates += aggregates
            }
        }
        return out
    }
}
