import Foundation

/// Where deletions (erasure by device, data-protection.md) are recorded and carried out:
/// ``PostgresDeletionStore`` on the server.
protocol DeletionStore: Sendable {
    /// Records a deletion of every report of `project` stored with device id `device` until now;
    /// returns its id. Keeps only a hash of the device id, until the reports are listed.
    func request(project: Int64, device: String) async throws -> UUID

    /// The deletion `id` of `project`, or nil (unknown, or another project's).
    func deletion(project: Int64, id: UUID) async throws -> Deletion?

    /// Takes one step of the oldest pending deletion that no other worker holds: lists its
    /// reports, erases the next `limit` of them, rebuilds the next of the device sketches the
    /// erased reports were in (once every report is erased), or marks it done. Nil when there is
    /// none.
    func step(limit: Int) async throws -> DeletionStep?
}

/// What one ``DeletionStore/step(limit:)`` did, committed.
enum DeletionStep: Sendable, Equatable {
    /// Listed the deletion's reports (and forgot the device id's hash).
    case listed(UUID, reports: Int)
    /// Erased this many reports of the deletion.
    case erased(UUID, reports: Int)
    /// Rebuilt this many device sketches of the buckets its erased reports were in.
    case rebuilt(UUID, sketches: Int)
    /// Nothing left: the deletion is done.
    case done(UUID)
}
