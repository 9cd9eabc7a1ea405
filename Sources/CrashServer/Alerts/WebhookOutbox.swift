import Foundation

/// The webhook outbox's part of the ingest transaction (see ``WebhookStore`` for the rest of
/// the outbox: claims, outcomes, pruning).
enum WebhookOutbox {
    /// The transactional outbox's ingest step: queues `group.new` and `group.regressed`
    /// deliveries in the ingest transaction itself, so an event commits with the reports
    /// that caused it or not at all (a crash, SIGTERM or database restart loses none, and a
    /// retried duplicate, which stores nothing, queues nothing).
    ///
    /// Runs after the groups' counts were added: a group is new when its count is exactly
    /// this batch's reports of it (every committed group has counted its first reports, in
    /// the transaction that created it); `regressed` are the groups this transaction turned
    /// from resolved to regressed. Rows only for webhooks subscribed to the event: a project
    /// without webhooks pays one index probe per group of the batch.
    ///
    /// From `groupIDs` (the group of each stored report), returns the groups of the batch with
    /// their count in it, and the regressed groups; the
    /// insert is the last part of the ingest statement that writes reports and rollups.
    static func eventRows(_ groupIDs: [Int64], regressed: Set<Int64>) -> (ids: [Int64], counts: [Int64], regressed: [Int64]) {
        var counts: [Int64: Int64] = [:]
        for id in groupIDs { counts[id, default: 0] += 1 }
        let ids = counts.keys.sorted()
        return (ids, ids.map { counts[$0]! }, regressed.sorted())
    }
}
