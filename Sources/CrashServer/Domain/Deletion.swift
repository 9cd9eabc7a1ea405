import Foundation

/// An erasure of one device's reports (data-protection.md, "Erasure"): the body of `GET
/// /v1/projects/{project}/deletions/{id}`. It names no device: the record keeps no copy of the
/// device id.
struct Deletion: Codable, Sendable, Equatable {
    enum State: String, Codable, Sendable {
        /// Listed or erasing: some reports may still be stored.
        case pending
        /// Every report of the device stored before the request is gone, rollups included.
        case done
    }

    /// The deletion's id, a UUID.
    var deletion: String
    var state: State
    /// Reports erased so far.
    var reports: Int64
    var requestedAt: Date
    /// Null while pending.
    @NullWhenAbsent var doneAt: Date?
}

/// The answer of `DELETE /v1/projects/{project}/devices/{deviceId}`: 202 with the deletion's id.
struct DeletionAccepted: Codable, Sendable {
    var deletion: String
}
